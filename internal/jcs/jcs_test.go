package jcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
func TestAppendNumber_RFC8785AppendixB(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // minus zero
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got, err := AppendNumber(nil, math.Float64frombits(tt.bits))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("AppendNumber(%016x) = %s, want %s", tt.bits, got, tt.want)
			}
		})
	}
}

func TestAppendNumber_RejectsNaNAndInfinity(t *testing.T) {
	t.Parallel()
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000} {
		if got, err := AppendNumber(nil, math.Float64frombits(bits)); err == nil {
			t.Errorf("AppendNumber(%016x) = %s, want an error", bits, got)
		}
	}
}

// es-numbers.txt was produced by Node.js's String(number); see SOURCES.md.
func TestAppendNumber_MatchesECMAScript(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("testdata", "es-numbers.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		hex, want, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("bad line %q", sc.Text())
		}
		bits, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendNumber(nil, math.Float64frombits(bits))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("AppendNumber(%s) = %s, want %s", hex, got, want)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("read only %d numbers", n)
	}
}

// Numbers as they appear in JSON text, parsed at full precision.
func TestCanonicalize_Numbers(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"1e21", "1e+21"},
		{"1E+21", "1e+21"},
		{"1e-7", "1e-7"},
		{"0.000001", "0.000001"},
		{"333333333.33333329", "333333333.3333333"},
		{"-0", "0"},
		{"-0.0e5", "0"},
		{"5e-324", "5e-324"},
		{"1e-400", "0"}, // underflows to zero, as in ECMAScript
		{"1.7976931348623157e+308", "1.7976931348623157e+308"},
		{"9007199254740992", "9007199254740992"},
		{"9007199254740993", "9007199254740992"},
		{"295147905179352830000", "295147905179352830000"},
		{"1.0", "1"},
		{"4.50", "4.5"},
		{"2e-3", "0.002"},
		{"1E30", "1e+30"},
		{"0.000000000000000000000000001", "1e-27"},
		{"100", "100"},
		{"123456789012345678901234567890", "1.2345678901234568e+29"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonicalize(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// The RFC 8785 examples: canonical bytes and pinned hashes.
func TestCanonicalize_Golden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hash string
	}{
		{"values", "2d5e01a318d0f0879ab568c4be289c8b1f64ef8921a53c6277d5e069978baacb"},
		{"sorting", "5e321556d22018a9656991a9e94f77ec175fa193e52a2429d312f8419ec8b08c"},
		{"weird", "6af595a9aa80110b964b4de3f82a05fa6ae7423005019bacfa2620dddc4e94d1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := readFile(t, tt.name+".json")
			want := readFile(t, tt.name+".canon")
			got, err := Canonicalize(in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Canonicalize(%s)\n got %s\nwant %s", tt.name, got, want)
			}
			h, err := Hash(in)
			if err != nil {
				t.Fatal(err)
			}
			if h != tt.hash {
				t.Errorf("Hash(%s) = %s, want %s", tt.name, h, tt.hash)
			}
		})
	}
}

func TestCompareKeys_UTF16Order(t *testing.T) {
	t.Parallel()
	// RFC 8785 §3.2.3's example, in its required order.
	want := []string{"\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, CompareKeys)
	if !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"", "", 0},
		{"a", "", 1},
		{"a", "ab", -1},
		{"\uffff", "\U00010000", 1}, // U+FFFF vs D800 DC00
		{"\ud7ff", "\U00010000", -1},
		{"\U0001F600", "\U0001F601", -1},
		{"\U0010FFFF", "\ue000", -1},
		{"é", "e", 1},
	}
	for _, tt := range tests {
		if got := sign(CompareKeys(tt.a, tt.b)); got != tt.want {
			t.Errorf("CompareKeys(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := sign(CompareKeys(tt.b, tt.a)); got != -tt.want {
			t.Errorf("CompareKeys(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestCanonicalize_Strings(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`"\u0000\u0001\u001f"`, `"\u0000\u0001\u001f"`},
		{`"\b\t\n\f\r"`, `"\b\t\n\f\r"`},
		{`"\u0008\u0009\u000A\u000c\u000D"`, `"\b\t\n\f\r"`},
		{`"\/"`, `"/"`},
		{`"<>&"`, `"<>&"`},                // no HTML escaping
		{`"\u003c\u003e\u0026"`, `"<>&"`}, // escapes resolved
		{`"\u007f\u0080\u2028\u2029"`, "\"\u007f\u0080\u2028\u2029\""}, // verbatim
		{`"e\u0301"`, "\"e\u0301\""},                                   // no Unicode normalization
		{`"\u00e9"`, "\"\u00e9\""},
		{`"\ud83d\ude00"`, "\"\U0001F600\""},
		{`"\"\\"`, `"\"\\"`},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if err != nil {
			t.Errorf("Canonicalize(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalize_Structure(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{` { "b" : [ 1 , { "d":1,"c" :2} ] , "a" : { } } `, `{"a":{},"b":[1,{"c":2,"d":1}]}`},
		{`[]`, `[]`},
		{`"x"`, `"x"`},
		{` null `, `null`},
		{`[true,false,null]`, `[true,false,null]`},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if err != nil {
			t.Errorf("Canonicalize(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParse_Rejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    error
		pointer string
	}{
		{"empty", ``, ErrSyntax, ""},
		{"trailing data", `{} {}`, ErrSyntax, ""},
		{"trailing comma", `[1,]`, ErrSyntax, "/1"},
		{"leading zero", `01`, ErrSyntax, ""},
		{"bare minus", `-`, ErrSyntax, ""},
		{"dot without digits", `1.`, ErrSyntax, ""},
		{"exponent without digits", `1e+`, ErrSyntax, ""},
		{"plus sign", `+1`, ErrSyntax, ""},
		{"NaN literal", `NaN`, ErrSyntax, ""},
		{"single quotes", `'a'`, ErrSyntax, ""},
		{"raw control character", "\"a\x01\"", ErrSyntax, ""},
		{"bad escape", `"\x41"`, ErrSyntax, ""},
		{"short unicode escape", `"\u12"`, ErrSyntax, ""},
		{"unterminated string", `"abc`, ErrSyntax, ""},
		{"unterminated object", `{"a":1`, ErrSyntax, ""},
		{"missing colon", `{"a" 1}`, ErrSyntax, ""},
		{"byte order mark", "\ufeff{}", ErrSyntax, ""},
		{"invalid UTF-8", "\"\xff\"", ErrInvalidUTF8, ""},
		{"overlong UTF-8", "\"\xc0\xaf\"", ErrInvalidUTF8, ""},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", ErrInvalidUTF8, ""},
		{"duplicate key", `{"a":1,"a":1}`, ErrDuplicateKey, "/a"},
		{"nested duplicate key", `{"x":[{"a":1,"b":2,"b":3}]}`, ErrDuplicateKey, "/x/0/b"},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, ErrDuplicateKey, "/a"},
		{"lone high surrogate", `["\ud800"]`, ErrLoneSurrogate, "/0"},
		{"lone low surrogate", `{"k":"\udc00x"}`, ErrLoneSurrogate, "/k"},
		{"reversed surrogates", `"\udc00\ud800"`, ErrLoneSurrogate, ""},
		{"high then non-surrogate", `"\ud800\u0041"`, ErrLoneSurrogate, ""},
		{"number overflow", `{"n":1e400}`, ErrNumberRange, "/n"},
		{"negative overflow", `[-1.8e308]`, ErrNumberRange, "/0"},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ErrTooDeep, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse(%q) error = %v, want %v", tt.in, err, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if tt.want != ErrTooDeep && e.Pointer != tt.pointer {
				t.Errorf("pointer = %q, want %q", e.Pointer, tt.pointer)
			}
			if e.Offset < 0 || e.Offset > len(tt.in) {
				t.Errorf("offset %d outside the input", e.Offset)
			}
			if _, err := Canonicalize([]byte(tt.in)); err == nil {
				t.Errorf("Canonicalize accepted %q", tt.in)
			}
		})
	}
}

func TestParse_DeepButAllowed(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
}

func TestParse_KeepsNumberText(t *testing.T) {
	t.Parallel()
	v, err := Parse([]byte(`{"n":[12345678901234567890123,1.50,-0]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": []any{json.Number("12345678901234567890123"), json.Number("1.50"), json.Number("-0")}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("Parse = %#v, want %#v", v, want)
	}
}

func TestEqual(t *testing.T) {
	t.Parallel()
	eq, err := Equal([]byte(`{"a":1.0,"b":"\u00e9"}`), []byte(`{"b":"é","a":1}`))
	if err != nil || !eq {
		t.Errorf("Equal = %v, %v; want true", eq, err)
	}
	eq, err = Equal([]byte(`{"a":"e\u0301"}`), []byte(`{"a":"é"}`))
	if err != nil || eq {
		t.Errorf("Equal of unnormalized strings = %v, %v; want false", eq, err)
	}
}

func TestMarshal(t *testing.T) {
	t.Parallel()
	got, err := Marshal(struct {
		B string  `json:"b"`
		A float64 `json:"a"`
	}{B: "<&>", A: 1e21})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":1e+21,"b":"<&>"}`; string(got) != want {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzCanonicalize checks that canonical output is a fixed point, agrees
// with encoding/json on what is JSON, and decodes to the same value.
func FuzzCanonicalize(f *testing.F) {
	for _, name := range []string{"values.json", "sorting.json", "weird.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`0`, `-0.0`, `1e400`, `"\ud800"`, `{"a":1,"a":2}`, `[1,[2,{"x":null}]]`, `"\u2028<>"`, `1E-7`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Canonicalize(raw)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			// encoding/json must agree that real syntax errors are errors.
			if errors.Is(err, ErrSyntax) && json.Valid(raw) {
				t.Fatalf("rejected valid JSON %q: %v", raw, err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		if !utf8.Valid(c) || !json.Valid(c) {
			t.Fatalf("canonical form %q is not valid JSON", c)
		}
		again, err := Canonicalize(c)
		if err != nil {
			t.Fatalf("canonical form %q does not re-canonicalize: %v", c, err)
		}
		if !bytes.Equal(again, c) {
			t.Fatalf("not a fixed point:\n%q\n%q", c, again)
		}
		// Same value as encoding/json sees (floats compared as doubles).
		var a, b any
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %#v vs %#v", a, b)
		}
	})
}

func BenchmarkCanonicalize(b *testing.B) {
	for _, bc := range benchInputs(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.in)))
			for b.Loop() {
				if _, err := Canonicalize(bc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchInputs are the texts the canonicalization benchmarks run on: the
// "weird" sample and a 16-turn production batch.
func benchInputs(b *testing.B) []struct {
	name string
	in   []byte
} {
	raw, err := os.ReadFile(filepath.Join("testdata", "weird.json"))
	if err != nil {
		b.Fatal(err)
	}
	doc := []byte(`{"agent_id":"support-bot","turns":[` + strings.Repeat(`{"turn_id":"t-1","input_text":"Where is my order #1234?","final_text":"It ships tomorrow.","tool_calls":[{"name":"lookup_order","arguments":{"order":1234},"outcome":"ok","status_code":200,"latency_ms":41.5}],"tool_calls_omitted_count":0},`, 15) +
		`{"turn_id":"t-2","input_text":null,"final_text":null,"tool_calls":null,"tool_calls_omitted_count":0}]}`)
	return []struct {
		name string
		in   []byte
	}{{"weird", raw}, {"turns16", doc}}
}
