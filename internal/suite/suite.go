package suite

import (
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/grade"
)

// Format is a suite's serialization.
type Format string

// The formats a suite may be written in.
const (
	FormatYAML  Format = "yaml"
	FormatJSON  Format = "json"
	FormatJSONL Format = "jsonl"
)

// FormatFromContentType maps an upload's Content-Type to a Format:
// application/json; application/yaml, application/x-yaml, text/yaml,
// text/x-yaml; application/jsonl, application/x-ndjson,
// application/x-jsonlines, application/jsonlines.
func FormatFromContentType(ct string) (Format, error) {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("content type %q: %w", ct, err)
	}
	switch mt {
	case "application/json":
		return FormatJSON, nil
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return FormatYAML, nil
	case "application/jsonl", "application/x-ndjson", "application/x-jsonlines", "application/jsonlines":
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("content type %q is not a suite format (JSON, YAML or JSONL)", mt)
}

// Suite is a parsed, validated suite version (SPEC §7.1).
type Suite struct {
	// Name is the suite name (for JSONL, the file name without extension).
	Name string
	// Version is the explicit version name, "" when the document has none.
	Version string
	// ContentHash is the lowercase hex SHA-256 of Document.
	ContentHash string
	// Document is the canonical (RFC 8785) JSON of the normalized suite,
	// with the referenced fixtures' digests; see docs/suites.md.
	Document json.RawMessage
	// Defaults are the suite defaults.
	Defaults Defaults
	// Cases are in document order (directory form: suite file first, then
	// case files by name).
	Cases []Case
	// Fixtures maps each referenced fixture name to its SHA-256.
	Fixtures map[string]string
	// FixturesDir is the fixtures directory of a loaded suite, "" for a
	// parsed upload.
	FixturesDir string
}

// VersionID is the suite version's id: the explicit version name when
// there is one, else the content hash.
func (s *Suite) VersionID() string {
	if s.Version != "" {
		return s.Version
	}
	return s.ContentHash
}

// FixtureNames lists the referenced fixture names, in first-use order.
func (s *Suite) FixtureNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range s.Cases {
		for _, f := range c.Files {
			if !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// Case returns the case with id, if any.
func (s *Suite) Case(id string) (Case, bool) {
	for _, c := range s.Cases {
		if c.ID == id {
			return c, true
		}
	}
	return Case{}, false
}

// Defaults are suite-wide settings; CLI flags override them, and they
// override built-in defaults. Zero values mean "not set".
type Defaults struct {
	Repetitions int
	Timeout     time.Duration
	Graders     []grade.Spec
}

// Case is one case of a suite.
type Case struct {
	// ID is unique within the suite.
	ID string
	// Input is the case input object, canonical JSON.
	Input json.RawMessage
	// Files are the fixtures the case hands to the harness.
	Files []File
	// Graders are the effective graders: the suite defaults followed by the
	// case's own, or only the case's own with graders_replace.
	Graders []grade.Spec
	// OwnGraders are the graders the case declares itself.
	OwnGraders []grade.Spec
	// GradersReplace is the case's graders_replace flag.
	GradersReplace bool
	// Repetitions and Timeout override the defaults when non-zero.
	Repetitions int
	Timeout     time.Duration
	// Pointer locates the case in the suite document ("/cases/3").
	Pointer string
}

// File is a fixture a case references.
type File struct {
	Name    string
	Context string
	// SHA256 is the fixture revision's digest.
	SHA256 string
}

// Compile compiles the case's effective graders: its compiled verifier
// suite.
func (c Case) Compile() (grade.Suite, error) { return grade.Compile(c.Graders) }

// Error is a problem with a suite document, located by a JSON Pointer into
// the (combined) document and, when the source gives one, a file and line.
type Error struct {
	// Code is the gyre error code an API answers with: invalid_body,
	// fixture_missing, files_unsupported or grader_not_allowed.
	Code string
	// Pointer is an RFC 6901 pointer, e.g. /cases/2/files/0/name.
	Pointer string
	// File is the source file (Load only) and Line its 1-based line; 0 when
	// unknown.
	File    string
	Line    int
	Message string
}

// Error returns "file:line: pointer: message", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Pointer != "" {
		b.WriteString(e.Pointer)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// As lets errors.As turn an Error into the *gyre.Error an API answers with
// (the line, when known, is part of the message).
func (e *Error) As(target any) bool {
	t, ok := target.(**gyre.Error)
	if !ok {
		return false
	}
	msg := e.Message
	if e.Line > 0 {
		msg = fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	*t = &gyre.Error{Code: e.Code, Message: msg, Pointer: e.Pointer}
	return true
}

// Options tune parsing.
type Options struct {
	// Name is the suite name of a JSONL upload (Parse); Load takes it from
	// the file name.
	Name string
	// ResolveFixture maps a fixture name to the SHA-256 of its current
	// revision (Parse: the server's fixture registry). A name it does not
	// know is a fixture_missing error pointing at the case's file entry.
	// Load reads fixtures from the fixtures directory instead.
	ResolveFixture func(name string) (sha256 string, ok bool)
	// AllowCommand, when set, is asked about every command grader's argv;
	// a refusal is a grader_not_allowed error at that grader. nil accepts
	// command graders (whether they may run is decided again at grading).
	AllowCommand func(argv []string) bool
}

// nameRE is the grammar of names gyre defines (SPEC §2): suite names,
// version names, case ids and fixture names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)

// ValidName reports whether s follows the name grammar of SPEC §2:
// ^[A-Za-z0-9._-]{1,255}$ and not "." or "..".
func ValidName(s string) bool { return nameRE.MatchString(s) && s != "." && s != ".." }
