package flywheel

import (
	"fmt"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The contract's patterns are ECMA-262 regular expressions with lookahead
// ("(?!...)"), which Go's RE2-based regexp cannot compile. ecmaRegexp runs
// them with github.com/dlclark/regexp2 in its ECMAScript mode, whose
// semantics the tests in regex_test.go pin:
//
//   - \s is ECMA-262 WhiteSpace plus LineTerminator: U+0009–U+000D, U+0020,
//     U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000
//     and U+FEFF, and not U+0085 or U+180E;
//   - \d is [0-9] and \w is [A-Za-z0-9_] (ASCII only);
//   - $ without the m flag matches only at the very end of the input (not
//     before a final line feed, as in .NET and PCRE);
//   - matching is by code point, as with ECMA-262's u flag.
//
// One difference from ECMA-262 remains, on purpose: "." matches every
// character except U+000A and U+000D, so it also matches U+2028 and U+2029,
// which ECMA-262 excludes. The contract uses "." only inside the negative
// lookaheads "(?!.*\s$)" and "(?!.*[\\/])", and its descriptions forbid
// trailing whitespace and any slash or backslash anywhere in the identifier.
// With the narrower ECMA-262 dot those lookaheads stop at a U+2028, so
// "a\u2028/b" would pass although its description forbids it; the wider dot
// enforces the description. U+000A and U+000D are C0 controls the patterns
// reject anyway, so no value the descriptions allow is rejected.
//
// Matching has no timeout: only the embedded contract's patterns run here,
// and each is linear in the input's length.
type ecmaRegexp struct{ re *regexp2.Regexp }

// compileECMA is the jsonschema.RegexpEngine for the embedded contract.
func compileECMA(pattern string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(pattern, regexp2.ECMAScript)
	if err != nil {
		return nil, fmt.Errorf("flywheel: compile pattern %q: %w", pattern, err)
	}
	return ecmaRegexp{re: re}, nil
}

// MatchString reports whether s contains a match. regexp2 errors only on a
// match timeout, which is disabled, so an error counts as no match.
func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok
}

// String returns the pattern's source text.
func (r ecmaRegexp) String() string { return r.re.String() }
