// Package suite reads suites (SPEC §7.1): YAML or JSON files, JSONL files
// (one case per line) and directories of case files, with strict parsing
// (unknown keys, duplicate keys and duplicate case ids are errors that carry
// a JSON Pointer and, when the source has one, a line), fixtures read only
// through an os.Root on the fixtures directory, grader declarations checked
// by grade.ParseSpecs, and a content hash over the canonical (RFC 8785)
// normalized document that includes every referenced fixture's SHA-256, so
// YAML and JSON of the same content hash the same. docs/suites.md is the
// reference for the format.
package suite
