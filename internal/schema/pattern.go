package schema

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MatchTimeout bounds one match of a pattern that only the ECMA-262 engine
// compiles (SPEC §2).
const MatchTimeout = 100 * time.Millisecond

// Pattern is a regular expression from a schema gyre does not own. It runs
// with Go's RE2 where the pattern compiles there (linear time, no timeout
// needed), else with the ECMA-262 engine of regexp2 (lookahead,
// backreferences…) and MatchTimeout per match. It is safe for concurrent
// use and satisfies jsonschema.Regexp.
type Pattern struct {
	re2  *regexp.Regexp
	ecma *regexp2.Regexp
}

// CompilePattern compiles p with RE2, or with ECMA-262 when RE2 refuses
// it; the error is ECMA-262's when neither engine compiles p.
func CompilePattern(p string) (*Pattern, error) {
	if re, err := regexp.Compile(p); err == nil {
		return &Pattern{re2: re}, nil
	}
	re, err := regexp2.Compile(p, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = MatchTimeout
	return &Pattern{ecma: re}, nil
}

// ErrMatchTimeout is Match's error when the ECMA-262 engine runs out of
// time: the pattern backtracks catastrophically on that input.
var ErrMatchTimeout = errors.New("pattern match timed out")

// Match reports whether s matches; the error, ErrMatchTimeout, is for a
// caller that tells a timeout from a mismatch.
func (p *Pattern) Match(s string) (bool, error) {
	if p.re2 != nil {
		return p.re2.MatchString(s), nil
	}
	ok, err := p.ecma.MatchString(s)
	if err != nil { // regexp2 fails a match only when it times out
		return false, fmt.Errorf("%w after %v", ErrMatchTimeout, p.ecma.MatchTimeout)
	}
	return ok, nil
}

// MatchString reports whether s matches. A timeout is no match, so in a
// schema it is a validation error.
func (p *Pattern) MatchString(s string) bool {
	ok, err := p.Match(s)
	return err == nil && ok
}

// String returns the pattern as written.
func (p *Pattern) String() string {
	if p.re2 != nil {
		return p.re2.String()
	}
	return p.ecma.String()
}

// compileRegexp is the jsonschema regexp engine: CompilePattern.
func compileRegexp(p string) (jsonschema.Regexp, error) {
	re, err := CompilePattern(p)
	if err != nil {
		return nil, err
	}
	return re, nil
}
