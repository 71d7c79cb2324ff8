package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestCompilePattern_Engine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		ecma    bool // false: RE2
	}{
		{`^[0-9]+$`, false},
		{`^\d{3}-\d{4}$`, false},
		{`^(a+)+$`, false},
		{`(?i)refund`, false},
		{`^(?=.*[0-9]).+$`, true},
		{`^(?!draft)`, true},
		{`(?<=\$)\d+`, true},
		{`^(a|b)\1$`, true},
	}
	for _, tt := range tests {
		p, err := CompilePattern(tt.pattern)
		if err != nil {
			t.Errorf("%s: %v", tt.pattern, err)
			continue
		}
		if got := p.ecma != nil; got != tt.ecma || (p.re2 != nil) == tt.ecma {
			t.Errorf("%s: ECMA engine = %v, want %v", tt.pattern, got, tt.ecma)
		}
		if p.String() != tt.pattern {
			t.Errorf("String() = %q, want %q", p.String(), tt.pattern)
		}
		if tt.ecma && p.ecma.MatchTimeout != MatchTimeout {
			t.Errorf("%s: timeout %v, want %v", tt.pattern, p.ecma.MatchTimeout, MatchTimeout)
		}
	}
}

func TestCompilePattern_NeitherEngine(t *testing.T) {
	t.Parallel()
	for _, p := range []string{`(?<`, `[z-a]`, `a{2,1}`, `(`} {
		if _, err := CompilePattern(p); err == nil {
			t.Errorf("%s compiled", p)
		}
	}
}

func TestPattern_Match(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{`^[0-9]+$`, "1042", true},
		{`^[0-9]+$`, "10a", false},
		{`^(?=.*[0-9]).+$`, "a1", true},
		{`^(?=.*[0-9]).+$`, "abc", false},
		{`^(a|b)\1$`, "bb", true},
		// RE2 runs in linear time: no timeout, a plain mismatch.
		{`^(a+)+$`, strings.Repeat("a", 64) + "!", false},
	}
	for _, tt := range tests {
		p, err := CompilePattern(tt.pattern)
		if err != nil {
			t.Fatalf("%s: %v", tt.pattern, err)
		}
		got, err := p.Match(tt.s)
		if err != nil || got != tt.want {
			t.Errorf("%s on %q = %v, %v; want %v, nil", tt.pattern, tt.s, got, err, tt.want)
		}
		if p.MatchString(tt.s) != tt.want {
			t.Errorf("%s on %q: MatchString disagrees with Match", tt.pattern, tt.s)
		}
	}
}

func TestPattern_Timeout(t *testing.T) {
	t.Parallel()
	// The lookahead forces the ECMA engine; the nested quantifier makes it
	// backtrack catastrophically on a string without the final b.
	p, err := CompilePattern(`^(?=(a+)+b)`)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Repeat("a", 64)
	if ok, err := p.Match(s); ok || !errors.Is(err, ErrMatchTimeout) {
		t.Errorf("Match = %v, %v; want false, ErrMatchTimeout", ok, err)
	}
	if p.MatchString(s) {
		t.Error("MatchString: a timeout matched")
	}
	// The same pattern still answers where it does not backtrack.
	if ok, err := p.Match("aab"); !ok || err != nil {
		t.Errorf("Match(aab) = %v, %v; want true, nil", ok, err)
	}
}
