package flywheel

import (
	"encoding/json"
	"slices"
	"testing"
)

// ecmaWhitespace is ECMA-262's WhiteSpace and LineTerminator: what \s
// matches (ECMA-262 §22.2.2.9, CharacterClassEscape :: s).
var ecmaWhitespace = []rune{
	0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x00A0, 0x1680,
	0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
	0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF,
}

func mustCompile(t *testing.T, pattern string) ecmaRegexp {
	t.Helper()
	re, err := compileECMA(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return re.(ecmaRegexp)
}

// \s is exactly ECMA-262 whitespace over the whole BMP plus a sample of the
// supplementary planes.
func TestECMARegexp_WhitespaceClass(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `^\s$`)
	notS := mustCompile(t, `^\S$`)
	inClass := mustCompile(t, `^[\s]$`)
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if r > 0xFFFF && r%0x101 != 0 {
			continue
		}
		want := slices.Contains(ecmaWhitespace, r)
		str := string(r)
		if got := s.MatchString(str); got != want {
			t.Errorf(`\s on U+%04X = %v, want %v`, r, got, want)
		}
		if got := notS.MatchString(str); got == want {
			t.Errorf(`\S on U+%04X = %v, want %v`, r, got, !want)
		}
		if got := inClass.MatchString(str); got != want {
			t.Errorf(`[\s] on U+%04X = %v, want %v`, r, got, want)
		}
	}
	// The usual suspects, named: not ECMA-262 whitespace.
	for _, r := range []rune{0x0085, 0x180E, 0x200B, 0x001C, 0x001F, 0x0000} {
		if s.MatchString(string(r)) {
			t.Errorf(`\s matches U+%04X, which ECMA-262 does not count as whitespace`, r)
		}
	}
}

func TestECMARegexp_ASCIIClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, in string
		want        bool
	}{
		{`^\d$`, "7", true},
		{`^\d$`, "\u0663", false}, // ARABIC-INDIC DIGIT THREE
		{`^\d$`, "\uFF17", false}, // FULLWIDTH DIGIT SEVEN
		{`^\w$`, "_", true},
		{`^\w$`, "Z", true},
		{`^\w$`, "é", false},
		{`^\w$`, "\u0663", false},
		{`^\D$`, "\u0663", true},
		{`^\W$`, "é", true},
		{`ac$`, "ac\n", false}, // $ only at the very end
		{`^ac$`, "ac", true},
		{`^.$`, "\n", false},
		{`^.$`, "\r", false},
		{`^.$`, "\u2028", true}, // deliberate; see regex.go
		{`^.$`, "\U0001F600", true},
		{`^[^\u0000-\u001F\u007F-\u009F]+$`, "a\u0085b", false},
		{`^(?!x)`, "xa", false},
		{`^(?!x)`, "ax", true},
	}
	for _, tt := range tests {
		if got := mustCompile(t, tt.pattern).MatchString(tt.in); got != tt.want {
			t.Errorf("%s on %q = %v, want %v", tt.pattern, tt.in, got, tt.want)
		}
	}
}

func TestECMARegexp_CompileError(t *testing.T) {
	t.Parallel()
	if _, err := compileECMA(`(`); err == nil {
		t.Error("compileECMA accepted an unbalanced group")
	}
	re := mustCompile(t, `a+`)
	if re.String() != `a+` {
		t.Errorf("String() = %q", re.String())
	}
}

// Every pattern and format the contract uses has a sentence in the
// explainer, and every if/then rule has a condition.
func TestExplainer_CoversContract(t *testing.T) {
	t.Parallel()
	var doc any
	if err := json.Unmarshal(ContractJSON, &doc); err != nil {
		t.Fatal(err)
	}
	patterns, formats := map[string]bool{}, map[string]bool{}
	ifs := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["pattern"].(string); ok {
				patterns[p] = true
			}
			if f, ok := v["format"].(string); ok {
				formats[f] = true
			}
			if _, ok := v["if"]; ok {
				ifs++
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	for p := range patterns {
		if _, ok := patternRules[p]; !ok {
			t.Errorf("pattern %s has no explanation in patternRules", p)
		}
	}
	for p := range patternRules {
		if !patterns[p] {
			t.Errorf("patternRules explains %s, which the contract does not use", p)
		}
	}
	for f := range formats {
		if _, ok := formatRules[f]; !ok {
			t.Errorf("format %s has no explanation in formatRules", f)
		}
	}
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	if len(v.explainer.conditions) != ifs || ifs == 0 {
		t.Errorf("explainer has %d if/then conditions, the contract %d", len(v.explainer.conditions), ifs)
	}
	for then, cond := range v.explainer.conditions {
		if cond != `when outcome is "unknown"` {
			t.Errorf("%s: condition %q", then, cond)
		}
	}
}
