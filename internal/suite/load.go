package suite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre"
)

// Parse parses an uploaded suite document (the server's POST /suites).
// Fixtures come from opts.ResolveFixture; a `fixtures` directory key is
// accepted and ignored. A JSONL upload takes its name from opts.Name.
func Parse(raw []byte, format Format, opts Options) (*Suite, error) {
	resolve := func(name string) (string, *Error) {
		if opts.ResolveFixture != nil {
			if sum, ok := opts.ResolveFixture(name); ok {
				return sum, nil
			}
		}
		return "", &Error{Code: gyre.CodeFixtureMissing, Message: fmt.Sprintf("fixture %q has no revision", name)}
	}
	switch format {
	case FormatJSONL:
		if !ValidName(opts.Name) {
			return nil, &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("a JSONL suite needs a name matching ^[A-Za-z0-9._-]{1,255}$ (got %q)", opts.Name)}
		}
		cases, err := jsonlCases(raw, "")
		if err != nil {
			return nil, err
		}
		return build(&header{name: opts.Name}, cases, resolve, &opts)
	case FormatJSON, FormatYAML:
		root, err := parseTree(raw, format, "")
		if err != nil {
			return nil, err
		}
		s := &src{root: root}
		h, err := decodeHeader(s, root, &opts, true)
		if err != nil {
			return nil, err
		}
		return build(h, casesOf(s, h), resolve, &opts)
	}
	return nil, fmt.Errorf("suite: unknown format %q", format)
}

func parseTree(raw []byte, format Format, file string) (*node, error) {
	if format == FormatJSON {
		return fromJSON(raw, file, 1, "")
	}
	return fromYAML(raw, file, "")
}

func casesOf(s *src, h *header) []caseSource {
	if h.cases == nil {
		return nil
	}
	out := make([]caseSource, len(h.cases.items))
	for i, n := range h.cases.items {
		out[i] = caseSource{s: s, n: n, ptr: "/cases/" + strconv.Itoa(i)}
	}
	return out
}

// jsonlCases reads one case per non-blank line.
func jsonlCases(raw []byte, file string) ([]caseSource, error) {
	var out []caseSource
	for i, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ptr := "/cases/" + strconv.Itoa(len(out))
		n, err := fromJSON(line, file, i+1, ptr)
		if err != nil {
			return nil, err
		}
		out = append(out, caseSource{s: &src{file: file, root: n, base: ptr}, n: n, ptr: ptr})
	}
	return out, nil
}

// formatOf maps a file extension to a format.
func formatOf(path string) (Format, bool) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatYAML, true
	case ".json":
		return FormatJSON, true
	case ".jsonl", ".ndjson":
		return FormatJSONL, true
	}
	return "", false
}

// Load reads a suite from disk: a YAML or JSON file, a JSONL file (one case
// per line, named after the file), or a directory holding suite.yaml (or
// suite.yml or suite.json) and case files under cases/. Fixtures are read
// through an os.Root on the fixtures directory: the `fixtures` key relative
// to the suite file, else the directory `fixtures` beside it.
func Load(path string, opts Options) (*Suite, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	if fi.IsDir() {
		return loadDir(path, opts)
	}
	format, ok := formatOf(path)
	if !ok {
		return nil, &Error{Code: gyre.CodeInvalidBody, File: path, Message: "suite files end in .yaml, .yml, .json or .jsonl"}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	dir := filepath.Dir(path)
	if format == FormatJSONL {
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if !ValidName(name) {
			return nil, &Error{Code: gyre.CodeInvalidBody, File: path, Message: fmt.Sprintf("a JSONL suite is named after its file; %q must match ^[A-Za-z0-9._-]{1,255}$", name)}
		}
		cases, err := jsonlCases(raw, path)
		if err != nil {
			return nil, err
		}
		return buildLocal(&header{name: name}, cases, dir, &opts)
	}
	root, err := parseTree(raw, format, path)
	if err != nil {
		return nil, err
	}
	s := &src{file: path, root: root}
	h, err := decodeHeader(s, root, &opts, true)
	if err != nil {
		return nil, err
	}
	return buildLocal(h, casesOf(s, h), dir, &opts)
}

// loadDir reads the directory form.
func loadDir(dir string, opts Options) (*Suite, error) {
	var suiteFile string
	for _, n := range []string{"suite.yaml", "suite.yml", "suite.json"} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			if suiteFile != "" {
				return nil, &Error{Code: gyre.CodeInvalidBody, File: p, Message: fmt.Sprintf("%s already defines the suite", suiteFile)}
			}
			suiteFile = p
		}
	}
	if suiteFile == "" {
		return nil, &Error{Code: gyre.CodeInvalidBody, File: dir, Message: "a suite directory holds suite.yaml, suite.yml or suite.json"}
	}
	format, _ := formatOf(suiteFile)
	raw, err := os.ReadFile(suiteFile)
	if err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	root, err := parseTree(raw, format, suiteFile)
	if err != nil {
		return nil, err
	}
	s := &src{file: suiteFile, root: root}
	h, err := decodeHeader(s, root, &opts, false)
	if err != nil {
		return nil, err
	}
	cases := casesOf(s, h)
	entries, err := os.ReadDir(filepath.Join(dir, "cases"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("suite: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if f, ok := formatOf(e.Name()); ok && f != FormatJSONL {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(dir, "cases", name)
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("suite: %w", err)
		}
		format, _ := formatOf(name)
		ptr := "/cases/" + strconv.Itoa(len(cases))
		var n *node
		if format == FormatJSON {
			n, err = fromJSON(raw, p, 1, ptr)
		} else {
			n, err = fromYAML(raw, p, ptr)
		}
		if err != nil {
			return nil, err
		}
		cases = append(cases, caseSource{s: &src{file: p, root: n, base: ptr}, n: n, ptr: ptr})
	}
	return buildLocal(h, cases, dir, &opts)
}

// buildLocal builds a loaded suite, hashing fixtures from the fixtures
// directory through an os.Root.
func buildLocal(h *header, cases []caseSource, dir string, opts *Options) (*Suite, error) {
	fixDir := filepath.Join(dir, "fixtures")
	if h.hasFixtures {
		fixDir = h.fixtures
		if !filepath.IsAbs(fixDir) {
			fixDir = filepath.Join(dir, fixDir)
		}
	}
	fr := &fixtureRoot{dir: fixDir}
	defer fr.close()
	s, err := build(h, cases, fr.hash, opts)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(fixDir); err == nil {
		fixDir = abs
	}
	s.FixturesDir = fixDir
	return s, nil
}

// fixtureRoot hashes fixtures inside one directory, refusing anything that
// leaves it: names are single path elements (the name grammar), and the
// os.Root refuses symlinks that point outside.
type fixtureRoot struct {
	dir  string
	root *os.Root
	err  error
	done bool
}

func (r *fixtureRoot) close() {
	if r.root != nil {
		r.root.Close()
	}
}

func (r *fixtureRoot) hash(name string) (string, *Error) {
	if !ValidName(name) {
		return "", &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("invalid fixture name %q", name)}
	}
	if !r.done {
		r.done = true
		r.root, r.err = os.OpenRoot(r.dir)
	}
	if r.err != nil {
		return "", &Error{Code: gyre.CodeFixtureMissing, Message: fmt.Sprintf("fixtures directory %s: %v", r.dir, unwrapPath(r.err))}
	}
	f, err := r.root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Code: gyre.CodeFixtureMissing, Message: fmt.Sprintf("fixture %q is not in %s", name, r.dir)}
		}
		return "", &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("fixture %q: %v", name, unwrapPath(err))}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("fixture %q: %v", name, unwrapPath(err))}
	}
	if !fi.Mode().IsRegular() {
		return "", &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("fixture %q is not a regular file", name)}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", &Error{Code: gyre.CodeInvalidBody, Message: fmt.Sprintf("fixture %q: %v", name, unwrapPath(err))}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// unwrapPath drops the path from a *fs.PathError, keeping the reason.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
