package harnesscheck

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxLineFileBytes bounds the suite files read to find lines.
const maxLineFileBytes = 64 << 20

// lineFinder maps a JSON Pointer into a loaded suite back to the file and
// line it came from, for the forms of SPEC §7.1: one YAML or JSON file, a
// JSONL file (one case per non-blank line) and a directory (suite file
// cases, then one case per file of cases/, in name order).
type lineFinder struct {
	// file and root are the suite file and its parsed document.
	file string
	root *yaml.Node
	// jsonlLines are the 1-based lines of a JSONL suite's cases.
	jsonlLines []int
	// caseFiles are a directory suite's case files, after the suite
	// file's own cases (suiteCases of them).
	caseFiles  []string
	suiteCases int
}

// newLineFinder prepares a lineFinder for the suite at path; what it
// cannot read it leaves unlocated.
func newLineFinder(path string) *lineFinder {
	lf := &lineFinder{}
	fi, err := os.Stat(path)
	if err != nil {
		return lf
	}
	if !fi.IsDir() {
		lf.file = path
		switch strings.ToLower(filepath.Ext(path)) {
		case ".jsonl", ".ndjson":
			raw := readBounded(path)
			for i, line := range bytes.Split(raw, []byte("\n")) {
				if len(bytes.TrimSpace(line)) > 0 {
					lf.jsonlLines = append(lf.jsonlLines, i+1)
				}
			}
		default:
			lf.root = parseYAMLNode(readBounded(path))
		}
		return lf
	}
	for _, n := range []string{"suite.yaml", "suite.yml", "suite.json"} {
		p := filepath.Join(path, n)
		if _, err := os.Stat(p); err == nil {
			lf.file, lf.root = p, parseYAMLNode(readBounded(p))
			break
		}
	}
	if c, _ := lookup(lf.root, []string{"cases"}); c != nil && c.Kind == yaml.SequenceNode && lf.root.Kind == yaml.MappingNode && c != lf.root {
		lf.suiteCases = len(c.Content)
	}
	entries, _ := os.ReadDir(filepath.Join(path, "cases"))
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			lf.caseFiles = append(lf.caseFiles, filepath.Join(path, "cases", e.Name()))
		}
	}
	sort.Strings(lf.caseFiles)
	return lf
}

// readBounded reads a file of at most maxLineFileBytes, else nothing.
func readBounded(path string) []byte {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > maxLineFileBytes {
		return nil
	}
	b, _ := os.ReadFile(path)
	return b
}

// parseYAMLNode parses a YAML (or JSON) document into its node tree, nil
// when it does not parse.
func parseYAMLNode(raw []byte) *yaml.Node {
	if len(raw) == 0 {
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	return doc.Content[0]
}

// tokens splits a JSON Pointer into its unescaped reference tokens.
func tokens(ptr string) []string {
	if ptr == "" || ptr[0] != '/' {
		return nil
	}
	toks := strings.Split(ptr[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// lookup follows toks from n as far as it can and returns the deepest
// node reached (nil when n is nil) and its line: a mapping member's is
// its key's line.
func lookup(n *yaml.Node, toks []string) (*yaml.Node, int) {
	if n == nil {
		return nil, 0
	}
	line := n.Line
	for _, tok := range toks {
		var next *yaml.Node
		nextLine := 0
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next, nextLine = n.Content[i+1], n.Content[i].Line
					break
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				nextLine = next.Line
			}
		}
		if next == nil {
			break
		}
		n, line = next, nextLine
	}
	return n, line
}

// locate returns the file and line of ptr, "" and 0 when unknown.
func (lf *lineFinder) locate(ptr string) (string, int) {
	toks := tokens(ptr)
	caseIdx := -1
	if len(toks) >= 2 && toks[0] == "cases" {
		if i, err := strconv.Atoi(toks[1]); err == nil && i >= 0 {
			caseIdx = i
		}
	}
	switch {
	case lf.jsonlLines != nil:
		if caseIdx >= 0 && caseIdx < len(lf.jsonlLines) {
			return lf.file, lf.jsonlLines[caseIdx]
		}
		return lf.file, 0
	case caseIdx >= lf.suiteCases && caseIdx-lf.suiteCases < len(lf.caseFiles):
		file := lf.caseFiles[caseIdx-lf.suiteCases]
		_, line := lookup(parseYAMLNode(readBounded(file)), toks[2:])
		return file, line
	}
	_, line := lookup(lf.root, toks)
	return lf.file, line
}
