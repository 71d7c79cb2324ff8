package atif

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Default limits of a Validator. DefaultMaxBytes matches the largest
// trajectory the evaluator accepts from a harness (SPEC §7.2).
const (
	DefaultMaxBytes      = 256 << 20
	DefaultMaxDepth      = 128
	DefaultMaxViolations = 1000
)

// maxSafeInt is the largest integer every JSON consumer reads exactly
// (2^53−1); integer fields beyond ±maxSafeInt are rejected.
const maxSafeInt = 1<<53 - 1

// Options configures a Validator. The zero Options is the default.
type Options struct {
	// Accepted lists the accepted schema_version values; nil means
	// AcceptedVersions(). Every entry must be a version this package knows
	// (ATIF-v1.0 to ATIF-v1.7).
	Accepted []string
	// MaxBytes bounds the document's size; 0 means DefaultMaxBytes.
	MaxBytes int
	// MaxDepth bounds how deeply objects and arrays nest, extra and
	// arguments included; 0 means DefaultMaxDepth. A deeper document gets
	// one violation and is not checked further.
	MaxDepth int
	// MaxViolations bounds how many violations a Result lists; the rest are
	// only counted (Result.Omitted). 0 means DefaultMaxViolations.
	MaxViolations int
	// ImageDir, when set, turns on Harbor's file check: every image path in
	// a content part that is not a URL (contains no "://") must name an
	// existing file, relative paths resolved against ImageDir. Leave it
	// empty when the image files were not fetched with the document.
	ImageDir string
}

// Validator checks ATIF documents. It is safe for concurrent use.
type Validator struct {
	accepted      map[string]int
	acceptedList  []string
	latest        int
	maxBytes      int
	maxDepth      int
	maxViolations int
	imageDir      string
}

// NewValidator returns a Validator configured by o.
func NewValidator(o Options) (*Validator, error) {
	list := acceptedList
	if o.Accepted != nil {
		if len(o.Accepted) == 0 {
			return nil, errors.New("atif: no accepted versions")
		}
		if err := checkVersions(o.Accepted); err != nil {
			return nil, fmt.Errorf("atif: accepted versions: %w", err)
		}
		list = o.Accepted
	}
	if o.MaxBytes < 0 || o.MaxDepth < 0 || o.MaxViolations < 0 {
		return nil, errors.New("atif: negative limit")
	}
	v := &Validator{
		accepted:      versionSet(list),
		acceptedList:  slices.Clone(list),
		maxBytes:      cmpOr(o.MaxBytes, DefaultMaxBytes),
		maxDepth:      cmpOr(o.MaxDepth, DefaultMaxDepth),
		maxViolations: cmpOr(o.MaxViolations, DefaultMaxViolations),
		imageDir:      o.ImageDir,
	}
	v.latest = latestMinor(v.accepted)
	return v, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

var defaultValidator = func() *Validator {
	v, err := NewValidator(Options{})
	if err != nil {
		panic(err)
	}
	return v
}()

// Violation is one way a document breaks ATIF.
type Violation struct {
	// Path locates the offending value Harbor-style: object keys and array
	// indexes (0-based) joined by dots, relative to the document root, e.g.
	// "steps.3.observation.results.0.source_call_id". Inside an embedded
	// subagent it continues through "subagent_trajectories.N.". A key that
	// is not a plain identifier is written as a quoted Go string. The root
	// itself is "".
	Path string `json:"path"`
	// Message says what is wrong.
	Message string `json:"message"`

	offset int // byte offset, for document order
}

// String returns "path: message", or the message alone at the root.
func (v Violation) String() string {
	if v.Path == "" {
		return v.Message
	}
	return v.Path + ": " + v.Message
}

// Result is the outcome of checking one document.
type Result struct {
	// SchemaVersion is the root's schema_version as found, accepted or not;
	// "" when it is absent or not a string.
	SchemaVersion string
	// Violations lists what is wrong, in document order; empty when the
	// document is valid.
	Violations []Violation
	// Omitted counts violations found beyond Options.MaxViolations.
	Omitted int
	// Trajectory is the decoded document when it is valid, else nil.
	Trajectory *Trajectory
}

// Valid reports whether the document had no violation.
func (r *Result) Valid() bool { return len(r.Violations) == 0 && r.Omitted == 0 }

// Err returns nil for a valid document, else a *ValidationError.
func (r *Result) Err() error {
	if r.Valid() {
		return nil
	}
	return &ValidationError{SchemaVersion: r.SchemaVersion, Violations: r.Violations, Omitted: r.Omitted}
}

// ValidationError reports every violation of an invalid document.
type ValidationError struct {
	// SchemaVersion is as in Result.
	SchemaVersion string
	// Violations lists what is wrong, in document order.
	Violations []Violation
	// Omitted counts violations beyond the Validator's limit.
	Omitted int
}

// Error names the first violation and how many more there are.
func (e *ValidationError) Error() string {
	n := len(e.Violations) + e.Omitted
	if len(e.Violations) == 0 {
		return fmt.Sprintf("atif: invalid document (%d violations)", n)
	}
	s := "atif: invalid document: " + e.Violations[0].String()
	if n > 1 {
		s += fmt.Sprintf(" (and %d more)", n-1)
	}
	return s
}

// Validate checks data with the default Validator and returns nil or a
// *ValidationError listing every violation.
func Validate(data []byte) error {
	r := defaultValidator.Check(data)
	return r.Err()
}

// Parse validates data with the default Validator and returns the decoded
// trajectory, or a *ValidationError.
func Parse(data []byte) (*Trajectory, error) { return defaultValidator.Parse(data) }

// Check validates data with the default Validator.
func Check(data []byte) Result { return defaultValidator.Check(data) }

// Validate checks data and returns nil or a *ValidationError.
func (v *Validator) Validate(data []byte) error {
	r := v.Check(data)
	return r.Err()
}

// Parse validates data and returns the decoded trajectory, or a
// *ValidationError.
func (v *Validator) Parse(data []byte) (*Trajectory, error) {
	r := v.Check(data)
	if err := r.Err(); err != nil {
		return nil, err
	}
	return r.Trajectory, nil
}

// Check validates data against the required subset of reference/atif.md
// §7, with Harbor's strictness on unknown keys and version-aware field
// gating, and reports every violation in one pass. Embedded subagent
// trajectories are checked recursively with their own schema_version.
func (v *Validator) Check(data []byte) Result {
	c := &checker{v: v, s: scanner{data: data}}
	tr := c.document()
	slices.SortStableFunc(c.violations, func(a, b Violation) int { return a.offset - b.offset })
	r := Result{Violations: c.violations, Omitted: c.omitted}
	if tr != nil {
		r.SchemaVersion = tr.SchemaVersion
		if r.Valid() {
			r.Trajectory = tr
		}
	}
	return r
}

// abortCheck unwinds a check that cannot go on (nesting too deep).
type abortCheck struct{}

// checker is one run of the validator over one document.
type checker struct {
	v          *Validator
	s          scanner
	path       []segment
	depth      int
	violations []Violation
	omitted    int
}

// segment is one step of a path: an object key, or an array index when
// index ≥ 0.
type segment struct {
	key   string
	index int
}

// trajState is what a trajectory's version-dependent rules need. Until its
// schema_version has been read (it may come last), version-dependent
// findings wait in deferred.
type trajState struct {
	minor    int // -1 until known
	deferred []deferred
}

// deferred is a version-dependent finding: a violation when lo ≤ minor <
// hi. A gated field (since > 0) gets a message naming both versions.
type deferred struct {
	path   string
	offset int
	lo, hi int
	since  int
	msg    string
}

func (c *checker) document() (tr *Trajectory) {
	data := c.s.data
	if len(data) > c.v.maxBytes {
		c.reportAt("", 0, fmt.Sprintf("document is %d bytes, over the limit of %d", len(data), c.v.maxBytes))
		return nil
	}
	if off := firstInvalidUTF8(data); off >= 0 {
		c.reportAt("", off, fmt.Sprintf("not valid UTF-8 (byte offset %d)", off))
		return nil
	}
	if !json.Valid(data) {
		var raw json.RawMessage
		err := json.Unmarshal(data, &raw)
		msg := "invalid JSON"
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := lineCol(data, int(se.Offset))
			msg = fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)
		} else if err != nil {
			msg = "invalid JSON: " + err.Error()
		}
		c.reportAt("", 0, msg)
		return nil
	}
	if k := c.s.next(); k != kindObject {
		c.reportAt("", 0, "must be a JSON object, got "+k.String())
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(abortCheck); !ok {
				panic(r)
			}
			tr = nil
		}
	}()
	return c.trajectory(false)
}

// lineCol turns the offset just past a syntax error into a 1-based line and
// column.
func lineCol(data []byte, off int) (int, int) {
	off = min(max(off, 0), len(data))
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, max(col-1, 1)
}

// --- paths and reporting ---

func (c *checker) push(key string) { c.path = append(c.path, segment{key: key, index: -1}) }
func (c *checker) pushIndex(i int) { c.path = append(c.path, segment{index: i}) }
func (c *checker) pop()            { c.path = c.path[:len(c.path)-1] }

// pathString renders the current path, with extra keys appended.
func (c *checker) pathString(extra ...string) string {
	var b []byte
	add := func(seg segment) {
		if len(b) > 0 {
			b = append(b, '.')
		}
		if seg.index >= 0 {
			b = strconv.AppendInt(b, int64(seg.index), 10)
		} else {
			b = appendKey(b, seg.key)
		}
	}
	for _, seg := range c.path {
		add(seg)
	}
	for _, k := range extra {
		add(segment{key: k, index: -1})
	}
	return string(b)
}

// appendKey writes a path key: plain identifiers as they are, anything
// else quoted (and long keys cut short) so that the path stays readable and
// unambiguous.
func appendKey(b []byte, key string) []byte {
	plain := key != ""
	for i := 0; i < len(key) && plain; i++ {
		c := key[i]
		plain = c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '-')
	}
	if plain && len(key) <= 64 {
		return append(b, key...)
	}
	return append(b, quote(key)...)
}

// quote writes s as a Go string literal, cut to about 64 bytes.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

func (c *checker) reportAt(path string, off int, msg string) {
	if len(c.violations) >= c.v.maxViolations {
		c.omitted++
		return
	}
	c.violations = append(c.violations, Violation{Path: path, Message: msg, offset: off})
}

// report records a violation at the current path and position.
func (c *checker) report(msg string) {
	if len(c.violations) >= c.v.maxViolations {
		c.omitted++
		return
	}
	c.reportAt(c.pathString(), c.s.pos, msg)
}

// missing reports a required member key absent from the object that
// started at off.
func (c *checker) missing(off int, key, msg string) {
	if msg == "" {
		msg = "field required"
	}
	c.reportAt(c.pathString(key), off, msg)
}

// versionRule records a version-dependent finding at path: a violation when
// lo ≤ minor < hi, decided now if t's version is known, else when it is.
func (c *checker) versionRule(t *trajState, path string, off, lo, hi, since int, msg string) {
	d := deferred{path: path, offset: off, lo: lo, hi: hi, since: since, msg: msg}
	if t.minor < 0 {
		t.deferred = append(t.deferred, d)
		return
	}
	c.resolve(t.minor, d)
}

func (c *checker) resolve(minor int, d deferred) {
	if minor < d.lo || minor >= d.hi {
		return
	}
	msg := d.msg
	if d.since > 0 {
		msg = fmt.Sprintf("unexpected field (not part of %s; added in %s)", versionName(minor), versionName(d.since))
	}
	c.reportAt(d.path, d.offset, msg)
}

// since gates the member at the current path to documents of ATIF-v1.N
// and later.
func (c *checker) since(t *trajState, n int) {
	if t.minor >= n { // the common case: version already read and recent enough
		return
	}
	c.versionRule(t, c.pathString(), c.s.pos, 0, n, n, "")
}

// --- structure ---

// enter counts one level of nesting, aborting the check past MaxDepth.
func (c *checker) enter(levels int) {
	if c.depth+levels > c.v.maxDepth {
		c.report(fmt.Sprintf("nesting deeper than %d levels", c.v.maxDepth))
		panic(abortCheck{})
	}
}

// skipValue moves past the value at the current position and returns its
// raw bytes, enforcing MaxDepth.
func (c *checker) skipValue() []byte {
	start, end, d := c.s.skip()
	c.enter(d)
	return c.s.data[start:end]
}

// object walks the object at the current position, calling member with
// each key pushed on the path; member must consume the value. Duplicate
// keys are violations and their values are skipped.
func (c *checker) object(member func(key string)) {
	c.enter(1)
	c.depth++
	c.s.expect('{')
	if !c.s.empty('}') {
		var small [16]string
		seen := small[:0]
		var many map[string]struct{}
		for {
			c.s.skipSpace()
			key := c.s.readString()
			c.s.expect(':')
			dup := false
			if many != nil {
				_, dup = many[key]
				many[key] = struct{}{}
			} else {
				dup = slices.Contains(seen, key)
				seen = append(seen, key)
				if len(seen) == cap(small) {
					many = make(map[string]struct{}, 2*len(seen))
					for _, k := range seen {
						many[k] = struct{}{}
					}
				}
			}
			c.push(key)
			if dup {
				c.report("duplicate key")
				c.skipValue()
			} else {
				member(key)
			}
			c.pop()
			if !c.s.more() {
				break
			}
		}
	}
	c.depth--
}

// array walks the array at the current position, calling elem with each
// index pushed on the path, and returns the length.
func (c *checker) array(elem func(i int)) int {
	c.enter(1)
	c.depth++
	c.s.expect('[')
	n := 0
	if !c.s.empty(']') {
		for {
			c.pushIndex(n)
			elem(n)
			c.pop()
			n++
			if !c.s.more() {
				break
			}
		}
	}
	c.depth--
	return n
}

// want checks that the next value has kind k; otherwise it reports "must
// be <what>, got <kind>" and skips the value.
func (c *checker) want(k jsonKind, what string) bool {
	got := c.s.next()
	if got == k {
		return true
	}
	c.report("must be " + what + ", got " + got.String())
	c.skipValue()
	return false
}

// null consumes a null and reports whether there was one.
func (c *checker) null() bool {
	if c.s.next() == kindNull {
		c.s.skip()
		return true
	}
	return false
}

func (c *checker) unknown() {
	c.report("unexpected field (not part of ATIF schema)")
	c.skipValue()
}

// --- scalars ---

func (c *checker) str() (string, bool) {
	if !c.want(kindString, "a string") {
		return "", false
	}
	return c.s.readString(), true
}

// optional reads null as nil, else a value with read; nil also when read
// reported it invalid.
func optional[T any](c *checker, read func() (T, bool)) *T {
	if c.null() {
		return nil
	}
	v, ok := read()
	if !ok {
		return nil
	}
	return &v
}

func (c *checker) optStr() *string { return optional(c, c.str) }

// integer reads an integer: a JSON number with an integral value (1, 1.0
// and 1e3 all count) within ±(2^53−1).
func (c *checker) integer() (int, bool) {
	got := c.s.next()
	if got != kindNumber {
		c.report("must be an integer, got " + got.String())
		c.skipValue()
		return 0, false
	}
	txt := c.s.readNumber()
	n, err := strconv.ParseInt(txt, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(txt, 64)
		switch {
		case ferr == nil && f == math.Trunc(f) && math.Abs(f) <= maxSafeInt:
			return int(f), true
		case (ferr == nil || errors.Is(ferr, strconv.ErrRange)) && f == math.Trunc(f):
			c.report("integer out of range, got " + quoteNum(txt))
		default:
			c.report("must be an integer, got " + quoteNum(txt))
		}
		return 0, false
	}
	if n > maxSafeInt || n < -maxSafeInt {
		c.report("integer out of range, got " + quoteNum(txt))
		return 0, false
	}
	return int(n), true
}

func quoteNum(txt string) string {
	if len(txt) > 32 {
		return txt[:32] + "…"
	}
	return txt
}

func (c *checker) optInt() *int { return optional(c, c.integer) }

// number reads a JSON number within the double range.
func (c *checker) number() (float64, bool) {
	got := c.s.next()
	if got != kindNumber {
		c.report("must be a number, got " + got.String())
		c.skipValue()
		return 0, false
	}
	txt := c.s.readNumber()
	f, err := strconv.ParseFloat(txt, 64)
	if err != nil && (math.IsInf(f, 0) || !errors.Is(err, strconv.ErrRange)) {
		c.report("number out of range, got " + quoteNum(txt))
		return 0, false
	}
	return f, true
}

func (c *checker) optNumber() *float64 { return optional(c, c.number) }

func (c *checker) optBool() *bool {
	if c.null() {
		return nil
	}
	if !c.want(kindBool, "a boolean") {
		return nil
	}
	b := c.s.readBool()
	return &b
}

// rawObject reads a required JSON object of any content, kept as sent.
func (c *checker) rawObject() (json.RawMessage, bool) {
	if !c.want(kindObject, "an object") {
		return nil, false
	}
	return slices.Clone(c.skipValue()), true
}

// optObject reads an optional JSON object of any content (extra).
func (c *checker) optObject() json.RawMessage {
	if c.null() {
		return nil
	}
	raw, _ := c.rawObject()
	return raw
}

func (c *checker) intArray() []int {
	if c.null() {
		return nil
	}
	if !c.want(kindArray, "an array of integers") {
		return nil
	}
	out := []int{}
	c.array(func(int) {
		n, _ := c.integer()
		out = append(out, n)
	})
	return out
}

func (c *checker) numArray() []float64 {
	if c.null() {
		return nil
	}
	if !c.want(kindArray, "an array of numbers") {
		return nil
	}
	out := []float64{}
	c.array(func(int) {
		f, _ := c.number()
		out = append(out, f)
	})
	return out
}

// --- ATIF objects ---

func (c *checker) trajectory(embedded bool) *Trajectory {
	tr := &Trajectory{}
	t := &trajState{minor: -1}
	start := c.s.pos
	var hasVersion, hasAgent, hasSteps bool
	c.object(func(key string) {
		switch key {
		case "schema_version":
			hasVersion = true
			v, ok := c.str()
			switch minor, listed := c.v.accepted[v]; {
			case !ok:
				t.minor = c.v.latest
			case !listed:
				tr.SchemaVersion = v
				t.minor = c.v.latest
				c.report(fmt.Sprintf("%s is not an accepted schema_version (accepted: %s)", quote(v), strings.Join(c.v.acceptedList, ", ")))
			default:
				tr.SchemaVersion = v
				t.minor = minor
			}
		case "session_id":
			tr.SessionID = c.optStr()
		case "trajectory_id":
			c.since(t, sinceV17)
			tr.TrajectoryID = c.optStr()
		case "agent":
			hasAgent = true
			tr.Agent = c.agent(t)
		case "steps":
			hasSteps = true
			tr.Steps = c.steps(t)
		case "notes":
			tr.Notes = c.optStr()
		case "final_metrics":
			tr.FinalMetrics = c.finalMetrics()
		case "continued_trajectory_ref":
			c.since(t, sinceV15)
			tr.ContinuedTrajectoryRef = c.optStr()
		case "extra":
			c.since(t, sinceRootExtra)
			tr.Extra = c.optObject()
		case "subagent_trajectories":
			c.since(t, sinceV17)
			tr.SubagentTrajectories = c.subagents()
		default:
			c.unknown()
		}
	})
	if !hasVersion {
		c.missing(start, "schema_version", "")
	}
	if t.minor < 0 {
		t.minor = c.v.latest
	}
	for _, d := range t.deferred {
		c.resolve(t.minor, d)
	}
	if !hasAgent {
		c.missing(start, "agent", "")
	}
	if !hasSteps {
		c.missing(start, "steps", "")
	}
	if tr.SessionID == nil {
		c.versionRule(t, c.pathString("session_id"), start, 0, sinceV17, 0, "field required (before ATIF-v1.7)")
	}
	if embedded && tr.TrajectoryID == nil {
		c.missing(start, "trajectory_id", "field required (on every embedded subagent trajectory)")
	}
	return tr
}

func (c *checker) subagents() []Trajectory {
	if c.null() {
		return nil
	}
	if !c.want(kindArray, "an array of trajectories") {
		return nil
	}
	out := []Trajectory{}
	first := map[string]int{}
	c.array(func(i int) {
		if !c.want(kindObject, "a trajectory object") {
			out = append(out, Trajectory{})
			return
		}
		sub := c.trajectory(true)
		if id := sub.TrajectoryID; id != nil {
			if j, dup := first[*id]; dup {
				c.reportAt(c.pathString("trajectory_id"), c.s.pos, fmt.Sprintf("duplicate trajectory_id %s (also subagent_trajectories.%d)", quote(*id), j))
			} else {
				first[*id] = i
			}
		}
		out = append(out, *sub)
	})
	return out
}

func (c *checker) agent(t *trajState) Agent {
	var a Agent
	if !c.want(kindObject, "an object") {
		return a
	}
	start := c.s.pos
	var hasName, hasVersion bool
	c.object(func(key string) {
		switch key {
		case "name":
			hasName = true
			a.Name, _ = c.str()
		case "version":
			hasVersion = true
			a.Version, _ = c.str()
		case "model_name":
			a.ModelName = c.optStr()
		case "tool_definitions":
			c.since(t, sinceV15)
			a.ToolDefinitions = c.objectArray()
		case "extra":
			a.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	if !hasName {
		c.missing(start, "name", "")
	}
	if !hasVersion {
		c.missing(start, "version", "")
	}
	return a
}

// objectArray reads an optional array of JSON objects of any content.
func (c *checker) objectArray() []json.RawMessage {
	if c.null() {
		return nil
	}
	if !c.want(kindArray, "an array of objects") {
		return nil
	}
	out := []json.RawMessage{}
	c.array(func(int) {
		raw, _ := c.rawObject()
		out = append(out, raw)
	})
	return out
}

func (c *checker) steps(t *trajState) []Step {
	if !c.want(kindArray, "an array of steps") {
		return nil
	}
	out := []Step{}
	if c.array(func(i int) { out = append(out, c.step(t, i)) }) == 0 {
		c.report("must contain at least 1 step")
	}
	return out
}

// keyAt remembers where a member was, for checks made after its object.
type keyAt struct {
	key string
	off int
}

// pendingCall is a source_call_id to resolve once the step's tool calls
// are known.
type pendingCall struct {
	id   string
	path string
	off  int
}

func (c *checker) step(t *trajState, i int) Step {
	var st Step
	if !c.want(kindObject, "a step object") {
		return st
	}
	start := c.s.pos
	var (
		hasID, hasSource, hasMessage bool
		sourceOK                     bool
		agentOnly                    []keyAt
		observationAt                = -1
		metricsAt, reasoningAt       keyAt
		callIDs                      map[string]struct{}
		callsSeen                    bool
		pending                      []pendingCall
	)
	checkCall := func(id string) {
		if callsSeen {
			if _, ok := callIDs[id]; !ok {
				c.report(fmt.Sprintf("%s does not match any tool_call_id of this step", quote(id)))
			}
			return
		}
		pending = append(pending, pendingCall{id: id, path: c.pathString(), off: c.s.pos})
	}
	c.object(func(key string) {
		off := c.s.pos
		switch key {
		case "step_id":
			hasID = true
			if id, ok := c.integer(); ok {
				st.StepID = id
				if id != i+1 {
					c.reportAt(c.pathString(), off, fmt.Sprintf("expected %d (sequential from 1), got %d", i+1, id))
				}
			}
		case "timestamp":
			if ts := c.optStr(); ts != nil {
				st.Timestamp = ts
				if !validTimestamp(*ts) {
					c.reportAt(c.pathString(), off, quote(*ts)+" is not an ISO 8601 timestamp")
				}
			}
		case "source":
			hasSource = true
			if s, ok := c.str(); ok {
				switch Source(s) {
				case SourceSystem, SourceUser, SourceAgent:
					st.Source = Source(s)
					sourceOK = true
				default:
					c.reportAt(c.pathString(), off, fmt.Sprintf(`must be one of "system", "user", "agent", got %s`, quote(s)))
				}
			}
		case "model_name":
			if st.ModelName = c.optStr(); st.ModelName != nil {
				agentOnly = append(agentOnly, keyAt{key, off})
			}
		case "reasoning_effort":
			if st.ReasoningEffort = c.reasoningEffort(); st.ReasoningEffort != nil {
				agentOnly = append(agentOnly, keyAt{key, off})
			}
		case "message":
			hasMessage = true
			st.Message, _ = c.content(t)
		case "reasoning_content":
			if st.ReasoningContent = c.optStr(); st.ReasoningContent != nil {
				agentOnly = append(agentOnly, keyAt{key, off})
				reasoningAt = keyAt{key, off}
			}
		case "tool_calls":
			var present bool
			st.ToolCalls, present = c.toolCalls(t)
			if present {
				agentOnly = append(agentOnly, keyAt{key, off})
			}
			callIDs = make(map[string]struct{}, len(st.ToolCalls))
			for _, tc := range st.ToolCalls {
				callIDs[tc.ToolCallID] = struct{}{}
			}
			callsSeen = true
		case "observation":
			if st.Observation = c.observation(t, checkCall); st.Observation != nil {
				observationAt = off
			}
		case "metrics":
			if st.Metrics = c.metrics(t); st.Metrics != nil {
				agentOnly = append(agentOnly, keyAt{key, off})
				metricsAt = keyAt{key, off}
			}
		case "is_copied_context":
			c.since(t, sinceV15)
			st.IsCopiedContext = c.optBool()
		case "llm_call_count":
			c.since(t, sinceV17)
			if st.LLMCallCount = c.optInt(); st.LLMCallCount != nil && *st.LLMCallCount < 0 {
				c.reportAt(c.pathString(), off, "must be ≥ 0")
			}
		case "extra":
			st.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	for _, p := range pending {
		if _, ok := callIDs[p.id]; !ok {
			c.reportAt(p.path, p.off, fmt.Sprintf("%s does not match any tool_call_id of this step", quote(p.id)))
		}
	}
	if !hasID {
		c.missing(start, "step_id", "")
	}
	if !hasSource {
		c.missing(start, "source", "")
	}
	if !hasMessage {
		c.missing(start, "message", "")
	}
	if sourceOK && st.Source != SourceAgent {
		for _, k := range agentOnly {
			c.reportAt(c.pathString(k.key), k.off, fmt.Sprintf("only allowed on agent steps (source is %q)", st.Source))
		}
	}
	if st.Source == SourceSystem && observationAt >= 0 {
		c.versionRule(t, c.pathString("observation"), observationAt, 0, sinceSystemObservation, 0,
			"not allowed on a system step before ATIF-v1.2")
	}
	if st.Source == SourceAgent && st.LLMCallCount != nil && *st.LLMCallCount == 0 {
		for _, k := range []keyAt{metricsAt, reasoningAt} {
			if k.key != "" {
				c.reportAt(c.pathString(k.key), k.off, "must be absent when llm_call_count is 0 (deterministic dispatch)")
			}
		}
	}
	return st
}

// reasoningEffort reads a string or a number, kept as sent.
func (c *checker) reasoningEffort() json.RawMessage {
	switch k := c.s.next(); k {
	case kindNull:
		c.s.skip()
		return nil
	case kindString, kindNumber:
		if k == kindNumber {
			pos := c.s.pos
			if _, ok := c.number(); !ok {
				return nil
			}
			return slices.Clone(c.s.data[pos:c.s.pos])
		}
		return slices.Clone(c.skipValue())
	default:
		c.report("must be a string or a number, got " + k.String())
		c.skipValue()
		return nil
	}
}

// content reads a message or result content: a string or (v1.6+) an array
// of content parts.
func (c *checker) content(t *trajState) (Content, bool) {
	switch k := c.s.next(); k {
	case kindString:
		return Content{Text: c.s.readString()}, true
	case kindArray:
		if t.minor < sinceContentParts {
			c.versionRule(t, c.pathString(), c.s.pos, 0, sinceContentParts, 0,
				"must be a string before ATIF-v1.6 (content part arrays were added in ATIF-v1.6)")
		}
		parts := []ContentPart{}
		c.array(func(int) { parts = append(parts, c.contentPart()) })
		return Content{Parts: parts}, true
	default:
		c.report("must be a string or an array of content parts, got " + k.String())
		c.skipValue()
		return Content{}, false
	}
}

func (c *checker) optContent(t *trajState) *Content {
	if c.null() {
		return nil
	}
	v, ok := c.content(t)
	if !ok {
		return nil
	}
	return &v
}

var imageMediaTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

func (c *checker) contentPart() ContentPart {
	var p ContentPart
	if !c.want(kindObject, "a content part object") {
		return p
	}
	start := c.s.pos
	var hasType, typeOK bool
	var textAt, sourceAt int
	c.object(func(key string) {
		off := c.s.pos
		switch key {
		case "type":
			hasType = true
			if s, ok := c.str(); ok {
				p.Type = s
				if typeOK = s == PartText || s == PartImage; !typeOK {
					c.reportAt(c.pathString(), off, fmt.Sprintf(`must be one of "text", "image", got %s`, quote(s)))
				}
			}
		case "text":
			textAt = off
			p.Text = c.optStr()
		case "source":
			sourceAt = off
			p.Source = c.imageSource()
		default:
			c.unknown()
		}
	})
	if !hasType {
		c.missing(start, "type", "")
	}
	if !typeOK {
		return p
	}
	switch p.Type {
	case PartText:
		if p.Text == nil {
			c.missing(start, "text", "field required on a text part")
		}
		if p.Source != nil {
			c.reportAt(c.pathString("source"), sourceAt, "not allowed on a text part")
		}
	case PartImage:
		if p.Source == nil {
			c.missing(start, "source", "field required on an image part")
		}
		if p.Text != nil {
			c.reportAt(c.pathString("text"), textAt, "not allowed on an image part")
		}
	}
	return p
}

func (c *checker) imageSource() *ImageSource {
	if c.null() {
		return nil
	}
	if !c.want(kindObject, "an image source object") {
		return nil
	}
	var src ImageSource
	start := c.s.pos
	var hasType, hasPath, pathOK bool
	pathAt := 0
	c.object(func(key string) {
		off := c.s.pos
		switch key {
		case "media_type":
			hasType = true
			if s, ok := c.str(); ok {
				src.MediaType = s
				if !slices.Contains(imageMediaTypes, s) {
					c.reportAt(c.pathString(), off, fmt.Sprintf("must be one of %s, got %s", strings.Join(imageMediaTypes, ", "), quote(s)))
				}
			}
		case "path":
			hasPath = true
			pathAt = off
			src.Path, pathOK = c.str()
		default:
			c.unknown()
		}
	})
	if !hasType {
		c.missing(start, "media_type", "")
	}
	if !hasPath {
		c.missing(start, "path", "")
	}
	if pathOK && c.v.imageDir != "" && !strings.Contains(src.Path, "://") {
		p := src.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.v.imageDir, filepath.FromSlash(p))
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			c.reportAt(c.pathString("path"), pathAt, "image file not found: "+quote(src.Path))
		}
	}
	return &src
}

// toolCalls reads a step's tool_calls and reports whether the member was
// non-null (an empty list counts: it is still agent-only).
func (c *checker) toolCalls(t *trajState) ([]ToolCall, bool) {
	if c.null() {
		return nil, false
	}
	if !c.want(kindArray, "an array of tool calls") {
		return nil, true
	}
	out := []ToolCall{}
	c.array(func(int) { out = append(out, c.toolCall(t)) })
	return out, true
}

func (c *checker) toolCall(t *trajState) ToolCall {
	var tc ToolCall
	if !c.want(kindObject, "a tool call object") {
		return tc
	}
	start := c.s.pos
	var hasID, hasName, hasArgs bool
	c.object(func(key string) {
		switch key {
		case "tool_call_id":
			hasID = true
			tc.ToolCallID, _ = c.str()
		case "function_name":
			hasName = true
			tc.FunctionName, _ = c.str()
		case "arguments":
			hasArgs = true
			if c.s.next() == kindString {
				c.report("must be an object, got string (a JSON-encoded string is not allowed)")
				c.skipValue()
				return
			}
			tc.Arguments, _ = c.rawObject()
		case "extra":
			c.since(t, sinceV17)
			tc.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	if !hasID {
		c.missing(start, "tool_call_id", "")
	}
	if !hasName {
		c.missing(start, "function_name", "")
	}
	if !hasArgs {
		c.missing(start, "arguments", "")
	}
	return tc
}

func (c *checker) observation(t *trajState, checkCall func(id string)) *Observation {
	if c.null() {
		return nil
	}
	if !c.want(kindObject, "an object") {
		return nil
	}
	obs := &Observation{}
	start := c.s.pos
	hasResults := false
	c.object(func(key string) {
		switch key {
		case "results":
			hasResults = true
			if !c.want(kindArray, "an array of results") {
				return
			}
			obs.Results = []ObservationResult{}
			c.array(func(int) { obs.Results = append(obs.Results, c.result(t, checkCall)) })
		default:
			c.unknown()
		}
	})
	if !hasResults {
		c.missing(start, "results", "")
	}
	return obs
}

func (c *checker) result(t *trajState, checkCall func(id string)) ObservationResult {
	var r ObservationResult
	if !c.want(kindObject, "a result object") {
		return r
	}
	c.object(func(key string) {
		switch key {
		case "source_call_id":
			if r.SourceCallID = c.optStr(); r.SourceCallID != nil {
				checkCall(*r.SourceCallID)
			}
		case "content":
			r.Content = c.optContent(t)
		case "subagent_trajectory_ref":
			r.SubagentTrajectoryRef = c.refs(t)
		case "extra":
			c.since(t, sinceV17)
			r.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	return r
}

func (c *checker) refs(t *trajState) []SubagentTrajectoryRef {
	if c.null() {
		return nil
	}
	if !c.want(kindArray, "an array of subagent trajectory references") {
		return nil
	}
	out := []SubagentTrajectoryRef{}
	c.array(func(int) { out = append(out, c.ref(t)) })
	return out
}

func (c *checker) ref(t *trajState) SubagentTrajectoryRef {
	var r SubagentTrajectoryRef
	if !c.want(kindObject, "a subagent trajectory reference object") {
		return r
	}
	start := c.s.pos
	c.object(func(key string) {
		switch key {
		case "session_id":
			r.SessionID = c.optStr()
		case "trajectory_id":
			c.since(t, sinceV17)
			r.TrajectoryID = c.optStr()
		case "trajectory_path":
			r.TrajectoryPath = c.optStr()
		case "extra":
			r.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	if r.SessionID == nil {
		c.versionRule(t, c.pathString("session_id"), start, 0, sinceV17, 0, "field required (before ATIF-v1.7)")
	}
	if r.TrajectoryID == nil && r.TrajectoryPath == nil {
		c.versionRule(t, c.pathString(), start, sinceV17, math.MaxInt, 0, "needs trajectory_id or trajectory_path (from ATIF-v1.7)")
	}
	return r
}

func (c *checker) metrics(t *trajState) *Metrics {
	if c.null() {
		return nil
	}
	if !c.want(kindObject, "an object") {
		return nil
	}
	m := &Metrics{}
	c.object(func(key string) {
		switch key {
		case "prompt_tokens":
			m.PromptTokens = c.optInt()
		case "completion_tokens":
			m.CompletionTokens = c.optInt()
		case "cached_tokens":
			m.CachedTokens = c.optInt()
		case "cost_usd":
			m.CostUSD = c.optNumber()
		case "prompt_token_ids":
			c.since(t, sincePromptTokenIDs)
			m.PromptTokenIDs = c.intArray()
		case "completion_token_ids":
			c.since(t, sinceCompletionTokenIDs)
			m.CompletionTokenIDs = c.intArray()
		case "logprobs":
			m.Logprobs = c.numArray()
		case "extra":
			m.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	return m
}

func (c *checker) finalMetrics() *FinalMetrics {
	if c.null() {
		return nil
	}
	if !c.want(kindObject, "an object") {
		return nil
	}
	m := &FinalMetrics{}
	c.object(func(key string) {
		switch key {
		case "total_prompt_tokens":
			m.TotalPromptTokens = c.optInt()
		case "total_completion_tokens":
			m.TotalCompletionTokens = c.optInt()
		case "total_cached_tokens":
			m.TotalCachedTokens = c.optInt()
		case "total_cost_usd":
			m.TotalCostUSD = c.optNumber()
		case "total_steps":
			off := c.s.pos
			if m.TotalSteps = c.optInt(); m.TotalSteps != nil && *m.TotalSteps < 0 {
				c.reportAt(c.pathString(), off, "must be ≥ 0")
			}
		case "extra":
			m.Extra = c.optObject()
		default:
			c.unknown()
		}
	})
	return m
}
