package grade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/jsonpointer"
)

// Spec is one grader as a suite declares it: a one-key object
// {<grader name>: <config>}. The config is an object, or for most graders a
// scalar shorthand (`contains: "refund"`). Inside an object config, three
// fields are common to every grader: optional (bool), weight (number > 0)
// and label (the verdict's grader field; default the grader name).
//
// A Spec returned by ParseSpecs is fully validated: Compile cannot fail on
// it except for environment policy.
type Spec struct {
	// Name is the grader name, e.g. "tool_called".
	Name string
	// Label is the verdict's grader field: the config's label, else Name.
	Label string
	// Optional verdicts are reported but never decide.
	Optional bool
	// Weight is the grader's weight in Reward (default 1).
	Weight float64
	// Config is the config value exactly as written (JSON).
	Config json.RawMessage
	// Pointer is where the spec was parsed from (JSON Pointer), for errors.
	Pointer string

	g grader
}

// Version is the version of the grader implementation that handles s.
func (s Spec) Version() string { return registry[s.Name].version }

// Flags returns the spec's optional flag and weight.
func (s Spec) Flags() Flags { return Flags{Optional: s.Optional, Weight: s.Weight} }

// MarshalJSON writes the spec back in its declared form, {name: config}.
func (s Spec) MarshalJSON() ([]byte, error) {
	cfg := s.Config
	if len(bytes.TrimSpace(cfg)) == 0 {
		cfg = json.RawMessage("null")
	}
	name, err := json.Marshal(s.Name)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	b.Write(name)
	b.WriteByte(':')
	b.Write(cfg)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// SpecError is a problem with a grader declaration. Pointer is a JSON
// Pointer (RFC 6901) to the offending value, e.g.
// /2/tool_called/name when ParseSpecs read the list itself, or
// /cases/3/graders/1/contains when a suite parsed it at that base.
type SpecError struct {
	// Code is the gyre error code: invalid_body, or grader_not_allowed.
	Code    string
	Pointer string
	Message string
}

// Error returns "pointer: message".
func (e *SpecError) Error() string {
	if e.Pointer == "" {
		return e.Message
	}
	return e.Pointer + ": " + e.Message
}

// As lets errors.As turn a SpecError into the *gyre.Error an API answers with.
func (e *SpecError) As(target any) bool {
	if t, ok := target.(**gyre.Error); ok {
		*t = &gyre.Error{Code: e.Code, Message: e.Message, Pointer: e.Pointer}
		return true
	}
	return false
}

func specErr(ptr, format string, args ...any) *SpecError {
	return &SpecError{Code: gyre.CodeInvalidBody, Pointer: ptr, Message: fmt.Sprintf(format, args...)}
}

// PointerToken escapes one reference token for a JSON Pointer (RFC 6901).
func PointerToken(s string) string {
	s = strings.ReplaceAll(s, "~", "~0")
	return strings.ReplaceAll(s, "/", "~1")
}

// ParseSpecs parses a JSON array of grader declarations. Error pointers are
// relative to the array (/2/tool_called/name); see ParseSpecsAt. A JSON
// null parses as no graders.
func ParseSpecs(raw []byte) ([]Spec, error) { return ParseSpecsAt(raw, "") }

// ParseSpecsAt is ParseSpecs with base prefixed to every pointer (e.g.
// "/graders" or "/cases/3/graders").
func ParseSpecsAt(raw []byte, base string) ([]Spec, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, specErr(base, "graders must be a list")
	}
	var items []json.RawMessage
	if err := strictUnmarshal(raw, &items); err != nil {
		return nil, specErr(base, "graders: %v", err)
	}
	specs := make([]Spec, 0, len(items))
	for i, item := range items {
		s, err := parseSpec(item, base+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func parseSpec(raw json.RawMessage, ptr string) (Spec, error) {
	members, isObj, err := objectMembers(raw)
	if err != nil {
		return Spec{}, specErr(ptr, "%v", err)
	}
	if !isObj || len(members) != 1 {
		return Spec{}, specErr(ptr, "a grader is an object with exactly one key, the grader name (e.g. {\"contains\": \"refund\"})")
	}
	name, cfgRaw := members[0].key, members[0].val
	d, ok := registry[name]
	if !ok {
		return Spec{}, specErr(ptr, "unknown grader %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	c, err := newConfig(cfgRaw, ptr+"/"+PointerToken(name), d.shorthand)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Name: name, Label: name, Weight: 1, Config: append(json.RawMessage(nil), bytes.TrimSpace(cfgRaw)...), Pointer: ptr}
	if c.obj {
		if b, ok, err := c.boolean("optional"); err != nil {
			return Spec{}, err
		} else if ok {
			s.Optional = b
		}
		if w, ok, err := c.number("weight"); err != nil {
			return Spec{}, err
		} else if ok {
			if w <= 0 {
				return Spec{}, c.errf("weight", "weight must be greater than 0 (use optional: true to keep a grader out of the reward)")
			}
			s.Weight = w
		}
		if l, ok, err := c.str("label", false); err != nil {
			return Spec{}, err
		} else if ok {
			if l == "" {
				return Spec{}, c.errf("label", "label must not be empty")
			}
			s.Label = l
		}
	}
	g, err := d.parse(c)
	if err != nil {
		return Spec{}, err
	}
	if err := c.finish(); err != nil {
		return Spec{}, err
	}
	s.g = g
	return s, nil
}

// Names lists every grader name SPEC §8 defines, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

type member struct {
	key string
	val json.RawMessage
}

// objectMembers reads a JSON object's members in document order, refusing
// duplicate keys. isObj is false (and err nil) when raw is valid JSON but
// not an object.
func objectMembers(raw []byte) (members []member, isObj bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false, errors.New("empty value")
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return nil, false, errors.New("invalid JSON")
		}
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, true, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, true, errors.New("invalid object key")
		}
		if seen[k] {
			return nil, true, fmt.Errorf("duplicate key %q", k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, true, err
		}
		members = append(members, member{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, true, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, true, errors.New("trailing data after object")
	}
	return members, true, nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// config reads one grader's config with pointer-carrying errors. A scalar
// shorthand is read as an object holding it under the grader's shorthand
// key; errors about it point at the config itself.
type config struct {
	base    string
	obj     bool // written as an object (common fields allowed)
	short   bool // written as a shorthand scalar
	members map[string]json.RawMessage
	order   []string
	used    map[string]bool
	null    bool // written as null
}

func newConfig(raw json.RawMessage, base, shorthand string) (*config, error) {
	c := &config{base: base, members: map[string]json.RawMessage{}, used: map[string]bool{}}
	members, isObj, err := objectMembers(raw)
	if err != nil {
		return nil, specErr(base, "%v", err)
	}
	switch {
	case isObj:
		c.obj = true
		for _, m := range members {
			c.members[m.key] = m.val
			c.order = append(c.order, m.key)
		}
	case isNull(raw):
		c.null = true
	case shorthand != "":
		c.short = true
		c.members[shorthand] = raw
		c.order = append(c.order, shorthand)
	default:
		return nil, specErr(base, "config must be an object")
	}
	return c, nil
}

func (c *config) ptr(key string) string {
	if c.short || key == "" {
		return c.base
	}
	return c.base + "/" + PointerToken(key)
}

func (c *config) errf(key, format string, args ...any) *SpecError {
	return specErr(c.ptr(key), format, args...)
}

func (c *config) take(key string) (json.RawMessage, bool) {
	v, ok := c.members[key]
	if ok {
		c.used[key] = true
	}
	return v, ok
}

// raw returns a key's raw value; required keys that are missing are errors.
func (c *config) raw(key string, required bool) (json.RawMessage, bool, error) {
	v, ok := c.take(key)
	if !ok && required {
		if c.null {
			return nil, false, c.errf("", "config is required (missing %q)", key)
		}
		return nil, false, c.errf("", "missing required field %q", key)
	}
	return v, ok, nil
}

func (c *config) str(key string, required bool) (string, bool, error) {
	v, ok, err := c.raw(key, required)
	if err != nil || !ok {
		return "", ok, err
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil || v[0] != '"' {
		return "", false, c.errf(key, "%s must be a string", key)
	}
	return s, true, nil
}

func (c *config) boolean(key string) (bool, bool, error) {
	v, ok := c.take(key)
	if !ok {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, false, c.errf(key, "%s must be true or false", key)
	}
	return b, true, nil
}

func (c *config) number(key string) (float64, bool, error) {
	v, ok := c.take(key)
	if !ok {
		return 0, false, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false, c.errf(key, "%s must be a number", key)
	}
	return f, true, nil
}

// count reads a non-negative integer.
func (c *config) count(key string, required bool) (int64, bool, error) {
	v, ok, err := c.raw(key, required)
	if err != nil || !ok {
		return 0, ok, err
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt32*float64(1<<20) {
		return 0, false, c.errf(key, "%s must be a non-negative integer", key)
	}
	return int64(f), true, nil
}

func (c *config) strList(key string, required bool) ([]string, bool, error) {
	v, ok, err := c.raw(key, required)
	if err != nil || !ok {
		return nil, ok, err
	}
	var out []string
	if err := json.Unmarshal(v, &out); err != nil || bytes.TrimSpace(v)[0] != '[' {
		return nil, false, c.errf(key, "%s must be a list of strings", key)
	}
	return out, true, nil
}

// object reads a JSON object value.
func (c *config) object(key string, required bool) (json.RawMessage, bool, error) {
	v, ok, err := c.raw(key, required)
	if err != nil || !ok {
		return nil, ok, err
	}
	if t := bytes.TrimSpace(v); len(t) == 0 || t[0] != '{' {
		return nil, false, c.errf(key, "%s must be an object", key)
	}
	return v, true, nil
}

// pointer reads an optional JSON Pointer field.
func (c *config) pointer(key string) (string, bool, error) {
	p, ok, err := c.str(key, false)
	if err != nil || !ok {
		return "", ok, err
	}
	if _, err := jsonpointer.Split(p); err != nil {
		return "", false, c.errf(key, "%v", err)
	}
	return p, true, nil
}

// finish reports the first key nobody read, in document order.
func (c *config) finish() error {
	for _, k := range c.order {
		if !c.used[k] {
			return c.errf(k, "unknown field %q", k)
		}
	}
	return nil
}
