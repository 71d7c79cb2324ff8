package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/jcs"
)

const (
	maxRepetitions = 1000
	maxTimeout     = 24 * time.Hour
)

// src is one parsed source file: the node its pointers start at and the
// pointer of that node in the combined document.
type src struct {
	file string
	root *node
	base string
}

func (s *src) line(ptr string) int {
	return lineAt(s.root, strings.TrimPrefix(ptr, s.base))
}

func (s *src) errf(code, ptr, format string, args ...any) *Error {
	return &Error{Code: code, File: s.file, Line: s.line(ptr), Pointer: ptr, Message: fmt.Sprintf(format, args...)}
}

func (s *src) invalid(ptr, format string, args ...any) *Error {
	return s.errf(gyre.CodeInvalidBody, ptr, format, args...)
}

// obj reads an object node strictly: a key outside the allowed set is an
// error (the first in document order), reported before anything else so
// that a misspelt key is named as such rather than as a missing one.
type obj struct {
	n   *node
	ptr string
	s   *src
}

func asObj(s *src, n *node, ptr, what string, allowed ...string) (*obj, error) {
	if n.kind != kObject {
		return nil, s.invalid(ptr, "%s must be an object, not %s", what, n.kind)
	}
	for _, k := range n.keys {
		if !slices.Contains(allowed, k) {
			return nil, s.invalid(ptr+"/"+grade.PointerToken(k), "unknown key %q (allowed: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return &obj{n: n, ptr: ptr, s: s}, nil
}

func (o *obj) field(key string) (*node, string, bool) {
	v, ok := o.n.get(key)
	return v, o.ptr + "/" + grade.PointerToken(key), ok
}

func (o *obj) str(key string, required bool) (string, string, bool, error) {
	v, ptr, ok := o.field(key)
	if !ok {
		if required {
			return "", ptr, false, o.s.invalid(o.ptr, "missing required key %q", key)
		}
		return "", ptr, false, nil
	}
	if v.kind != kString {
		return "", ptr, false, o.s.invalid(ptr, "%s must be a string, not %s", key, v.kind)
	}
	return v.str, ptr, true, nil
}

func (o *obj) name(key string, required bool) (string, bool, error) {
	s, ptr, ok, err := o.str(key, required)
	if err != nil || !ok {
		return "", ok, err
	}
	if !ValidName(s) {
		return "", false, o.s.invalid(ptr, "%s %q must match ^[A-Za-z0-9._-]{1,255}$ and not be . or ..", key, s)
	}
	return s, true, nil
}

func (o *obj) repetitions() (int, error) {
	v, ptr, ok := o.field("repetitions")
	if !ok {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v.str, 64)
	if v.kind != kNumber || err != nil || f != math.Trunc(f) || f < 1 || f > maxRepetitions {
		return 0, o.s.invalid(ptr, "repetitions must be an integer from 1 to %d", maxRepetitions)
	}
	return int(f), nil
}

func (o *obj) timeout() (time.Duration, error) {
	v, ptr, ok := o.field("timeout")
	if !ok {
		return 0, nil
	}
	bad := o.s.invalid(ptr, "timeout must be a positive duration like \"300s\" or a number of seconds, at most %s", maxTimeout)
	var d time.Duration
	switch v.kind {
	case kString:
		var err error
		if d, err = time.ParseDuration(v.str); err != nil {
			return 0, bad
		}
	case kNumber:
		f, err := strconv.ParseFloat(v.str, 64)
		if err != nil || f <= 0 || f > maxTimeout.Seconds() {
			return 0, bad
		}
		d = time.Duration(f * float64(time.Second))
	default:
		return 0, bad
	}
	if d <= 0 || d > maxTimeout {
		return 0, bad
	}
	return d, nil
}

func (o *obj) graders(key string, opts *Options) ([]grade.Spec, bool, error) {
	v, ptr, ok := o.field(key)
	if !ok || v.kind == kNull {
		return nil, ok, nil
	}
	if v.kind != kArray {
		return nil, false, o.s.invalid(ptr, "%s must be a list, not %s", key, v.kind)
	}
	specs, err := grade.ParseSpecsAt(v.json(), ptr)
	if err != nil {
		var se *grade.SpecError
		if errors.As(err, &se) {
			return nil, false, o.s.errf(se.Code, se.Pointer, "%s", se.Message)
		}
		return nil, false, o.s.invalid(ptr, "%v", err)
	}
	if opts.AllowCommand != nil {
		for _, sp := range specs {
			if argv := sp.CommandArgv(); argv != nil && !opts.AllowCommand(argv) {
				return nil, false, o.s.errf(gyre.CodeGraderNotAllowed, sp.Pointer+"/command",
					"command grader %q is not allowed here", argv[0])
			}
		}
	}
	return specs, true, nil
}

// header is the suite-level part of a document.
type header struct {
	name        string
	version     string
	defaults    Defaults
	fixtures    string
	hasFixtures bool
	fixturesPtr string
	cases       *node
	casesPtr    string
}

var topKeys = []string{"name", "version", "defaults", "fixtures", "cases"}

// decodeHeader reads the top-level object. casesRequired is false for the
// directory form's suite file.
func decodeHeader(s *src, root *node, opts *Options, casesRequired bool) (*header, error) {
	o, err := asObj(s, root, "", "a suite", topKeys...)
	if err != nil {
		return nil, err
	}
	h := &header{}
	if h.name, _, err = o.name("name", true); err != nil {
		return nil, err
	}
	if v, ok, err := o.name("version", false); err != nil {
		if vn, _ := root.get("version"); vn != nil && vn.kind == kNumber {
			return nil, s.invalid("/version", "version must be a string: quote it (\"%s\")", vn.str)
		}
		return nil, err
	} else if ok {
		h.version = v
	}
	if dn, dptr, ok := o.field("defaults"); ok {
		d, err := asObj(s, dn, dptr, "defaults", "repetitions", "timeout", "graders")
		if err != nil {
			return nil, err
		}
		if h.defaults.Repetitions, err = d.repetitions(); err != nil {
			return nil, err
		}
		if h.defaults.Timeout, err = d.timeout(); err != nil {
			return nil, err
		}
		if h.defaults.Graders, _, err = d.graders("graders", opts); err != nil {
			return nil, err
		}
	}
	if f, ptr, ok, err := o.str("fixtures", false); err != nil {
		return nil, err
	} else if ok {
		if f == "" {
			return nil, s.invalid(ptr, "fixtures must name a directory")
		}
		h.fixtures, h.hasFixtures, h.fixturesPtr = f, true, ptr
	}
	cn, cptr, ok := o.field("cases")
	switch {
	case !ok && casesRequired:
		return nil, s.invalid("", "missing required key \"cases\"")
	case ok && cn.kind != kArray:
		return nil, s.invalid(cptr, "cases must be a list, not %s", cn.kind)
	case ok:
		h.cases, h.casesPtr = cn, cptr
	}
	return h, nil
}

var caseKeys = []string{"id", "input", "files", "graders", "graders_replace", "repetitions", "timeout"}

// decodeCase reads one case object at ptr (e.g. /cases/3).
func decodeCase(s *src, n *node, ptr string, defaults []grade.Spec, opts *Options) (Case, error) {
	o, err := asObj(s, n, ptr, "a case", caseKeys...)
	if err != nil {
		return Case{}, err
	}
	c := Case{Pointer: ptr}
	if c.ID, _, err = o.name("id", true); err != nil {
		return Case{}, err
	}
	in, iptr, ok := o.field("input")
	if !ok {
		return Case{}, s.invalid(ptr, "missing required key \"input\"")
	}
	if in.kind != kObject {
		return Case{}, s.invalid(iptr, "input must be an object, not %s", in.kind)
	}
	if c.Input, err = jcs.Canonicalize(in.json()); err != nil {
		return Case{}, s.invalid(iptr, "input: %v", err)
	}
	if fn, fptr, ok := o.field("files"); ok {
		if c.Files, err = decodeFiles(s, fn, fptr); err != nil {
			return Case{}, err
		}
	}
	if c.OwnGraders, _, err = o.graders("graders", opts); err != nil {
		return Case{}, err
	}
	if rn, rptr, ok := o.field("graders_replace"); ok {
		if rn.kind != kBool {
			return Case{}, s.invalid(rptr, "graders_replace must be true or false")
		}
		c.GradersReplace = rn.b
	}
	if c.Repetitions, err = o.repetitions(); err != nil {
		return Case{}, err
	}
	if c.Timeout, err = o.timeout(); err != nil {
		return Case{}, err
	}
	if !c.GradersReplace {
		c.Graders = append(c.Graders, defaults...)
	}
	c.Graders = append(c.Graders, c.OwnGraders...)
	return c, nil
}

func decodeFiles(s *src, n *node, ptr string) ([]File, error) {
	if n.kind != kArray {
		return nil, s.invalid(ptr, "files must be a list, not %s", n.kind)
	}
	var out []File
	seen := map[string]int{}
	for i, fn := range n.items {
		p := ptr + "/" + strconv.Itoa(i)
		o, err := asObj(s, fn, p, "a file", "name", "context")
		if err != nil {
			return nil, err
		}
		var f File
		name, nptr, _, err := o.str("name", true)
		if err != nil {
			return nil, err
		}
		if !ValidName(name) {
			return nil, s.invalid(nptr, "fixture name %q must match ^[A-Za-z0-9._-]{1,255}$ and not be . or .. (no paths)", name)
		}
		if j, dup := seen[name]; dup {
			return nil, s.invalid(nptr, "fixture %q is already listed at %s/%d", name, ptr, j)
		}
		seen[name] = i
		f.Name = name
		if f.Context, _, _, err = o.str("context", false); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// caseSource is a case node with the source it came from.
type caseSource struct {
	s   *src
	n   *node
	ptr string
}

// build validates the cases, resolves fixtures and computes the hash.
func build(h *header, cases []caseSource, resolve func(name string) (string, *Error), opts *Options) (*Suite, error) {
	if len(cases) == 0 {
		return nil, &Error{Code: gyre.CodeInvalidBody, Pointer: "/cases", Message: "a suite needs at least one case"}
	}
	s := &Suite{Name: h.name, Version: h.version, Defaults: h.defaults}
	seen := map[string]string{}
	for _, cs := range cases {
		c, err := decodeCase(cs.s, cs.n, cs.ptr, h.defaults.Graders, opts)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[c.ID]; dup {
			return nil, cs.s.invalid(cs.ptr+"/id", "duplicate case id %q (first at %s)", c.ID, first)
		}
		seen[c.ID] = cs.ptr
		for j := range c.Files {
			if s.Fixtures == nil {
				s.Fixtures = map[string]string{}
			}
			name := c.Files[j].Name
			sum, ok := s.Fixtures[name]
			if !ok {
				var ferr *Error
				if sum, ferr = resolve(name); ferr != nil {
					p := fmt.Sprintf("%s/files/%d/name", cs.ptr, j)
					ferr.Pointer, ferr.File, ferr.Line = p, cs.s.file, cs.s.line(p)
					return nil, ferr
				}
				s.Fixtures[name] = sum
			}
			c.Files[j].SHA256 = sum
		}
		s.Cases = append(s.Cases, c)
	}
	doc, err := jcs.Marshal(normalized(s))
	if err != nil {
		return nil, fmt.Errorf("suite: canonicalize: %w", err)
	}
	s.Document = doc
	if s.ContentHash, err = jcs.Hash(doc); err != nil {
		return nil, fmt.Errorf("suite: hash: %w", err)
	}
	return s, nil
}

// normalized is the hashed form of a suite (docs/suites.md, "Versions").
func normalized(s *Suite) map[string]any {
	doc := map[string]any{"name": s.Name}
	if s.Version != "" {
		doc["version"] = s.Version
	}
	d := map[string]any{}
	if s.Defaults.Repetitions != 0 {
		d["repetitions"] = s.Defaults.Repetitions
	}
	if s.Defaults.Timeout != 0 {
		d["timeout"] = s.Defaults.Timeout.Seconds()
	}
	if len(s.Defaults.Graders) > 0 {
		d["graders"] = s.Defaults.Graders
	}
	if len(d) > 0 {
		doc["defaults"] = d
	}
	if len(s.Fixtures) > 0 {
		doc["fixtures"] = s.Fixtures
	}
	cases := make([]map[string]any, 0, len(s.Cases))
	for _, c := range s.Cases {
		m := map[string]any{"id": c.ID, "input": json.RawMessage(c.Input)}
		if len(c.Files) > 0 {
			files := make([]map[string]any, len(c.Files))
			for i, f := range c.Files {
				files[i] = map[string]any{"name": f.Name}
				if f.Context != "" {
					files[i]["context"] = f.Context
				}
			}
			m["files"] = files
		}
		if len(c.OwnGraders) > 0 {
			m["graders"] = c.OwnGraders
		}
		if c.GradersReplace {
			m["graders_replace"] = true
		}
		if c.Repetitions != 0 {
			m["repetitions"] = c.Repetitions
		}
		if c.Timeout != 0 {
			m["timeout"] = c.Timeout.Seconds()
		}
		cases = append(cases, m)
	}
	doc["cases"] = cases
	return doc
}
