package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fastSeeds are texts whose canonical form takes each rule of RFC 8785:
// key order by UTF-16 code units, number forms, string escapes; and texts
// nested just within and just past maxFastDepth.
var fastSeeds = []string{
	`{"b":1,"a":2,"aa":3,"":4,"A":5}`,
	`{"\ud83d\ude00":1,"\ufb33":2,"é":3,"e\u0301":4,"\u0000":5}`,
	`[0,-0,1.0,1e0,10e-1,-1.5e+3,1E21,1e-7,0.000001,123456789012345678,9007199254740993,5e-324,1.7976931348623157e308,-0.0]`,
	`[100000000000000000000,1e20,123456789012345,1234567890123456,-123456789012345,0.1,0.2,3.0e2]`,
	`"a\"b\\c\/d\b\f\n\r\t\u0001\u001f\u007f\u0080\u2028\u2029 \ud834\udd1e"`,
	`"plain é 😀 \u00e9"`,
	` { "z" : [ { "y" : null , "x" : true } , [ ] , { } ] , "a" : false } `,
	`{"a":{"b":{"c":{"d":[1,{"e":"f"}]}}}}`,
	strings.Repeat("[", maxFastDepth+1) + "1" + strings.Repeat("]", maxFastDepth+1),
	strings.Repeat("[", maxFastDepth) + "1" + strings.Repeat("]", maxFastDepth),
	strings.Repeat(`{"a":`, maxFastDepth+1) + "1" + strings.Repeat("}", maxFastDepth+1),
	strings.Repeat(`{"a":`, maxFastDepth-1) + `{"b":2,"a":1}` + strings.Repeat("}", maxFastDepth-1),
	`{"k\u0022":"v","k\"2":1}`,
}

// fastInputs are fastSeeds, this package's test data and the valid
// flywheel/1 examples (production turn batches among them): texts Parse
// accepts.
func fastInputs(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("jcs test data: %v", err)
	}
	flywheel, err := filepath.Glob(filepath.Join("..", "..", "flywheel", "testdata", "valid", "*", "*.json"))
	if err != nil || len(flywheel) == 0 {
		t.Fatalf("flywheel test data: %v", err)
	}
	inputs := slices.Clone(fastSeeds)
	for _, file := range append(files, flywheel...) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	return inputs
}

// fastOnly runs the one-pass canonicalizer alone on a whole text, without
// AppendValue's fallback for deep values: errFastTooDeep says it would
// fall back.
func fastOnly(raw []byte) ([]byte, error) {
	c := Canonicalizer{w: Walker{src: raw, names: map[string]string{}}}
	end, err := c.value(0, 0)
	if err != nil {
		return nil, err
	}
	if c.w.Space(end) != len(raw) {
		return nil, errors.New("data after the value")
	}
	return c.dst, nil
}

func TestAppendCanonical_MatchesCanonicalize(t *testing.T) {
	t.Parallel()
	deep := 0
	for _, in := range fastInputs(t) {
		want, err := Canonicalize([]byte(in))
		if err != nil {
			t.Fatalf("Canonicalize refuses seed %q: %v", in, err)
		}
		got, err := AppendCanonical([]byte("prefix"), []byte(in))
		if err != nil || string(got) != "prefix"+string(want) {
			t.Errorf("AppendCanonical(%q)\n = %q, %v\nwant %q", in, got, err, "prefix"+string(want))
		}
		fast, err := fastOnly([]byte(in))
		if errors.Is(err, errFastTooDeep) {
			deep++
			continue
		}
		if err != nil || !bytes.Equal(fast, want) {
			t.Errorf("one pass(%q)\n = %q, %v\nwant %q", in, fast, err, want)
		}
	}
	if deep != 2 {
		t.Errorf("%d seeds too deep for the one-pass canonicalizer, want the 2 nested past maxFastDepth", deep)
	}
}

func TestHashCanonical_IsHash(t *testing.T) {
	t.Parallel()
	for _, in := range fastInputs(t) {
		want, err := Hash([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := HashCanonical([]byte(in)); err != nil || got != want {
			t.Errorf("HashCanonical(%q) = %s, %v; Hash says %s", in, got, err, want)
		}
	}
}

func TestAppendCanonical_RefusesDataAfterTheValue(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{} {}`, `1 2`, `[]x`, ``, `  `} {
		if got, err := AppendCanonical(nil, []byte(in)); err == nil {
			t.Errorf("AppendCanonical(%q) = %q, want an error", in, got)
		}
	}
}

// memberSpan is one call of AppendValue's members function.
type memberSpan struct{ name, value string }

func TestCanonicalizer_ReportsTopLevelMembers(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", maxFastDepth+1) + "1" + strings.Repeat("]", maxFastDepth+1)
	tests := []struct {
		name string
		in   string
		want []memberSpan
	}{
		{"object", ` {"z": {"y":1,"x":[2]} ,"a":"s\"t","m":null} `,
			[]memberSpan{{"z", `{"y":1,"x":[2]}`}, {"a", `"s\"t"`}, {"m", "null"}}},
		{"escaped name", `{"\u0061":1}`, []memberSpan{{"a", "1"}}},
		{"empty object", `{}`, nil},
		{"array", `[{"a":1}]`, nil},
		{"scalar", `"x"`, nil},
		// Past maxFastDepth the value goes through Parse: still once each.
		{"too deep", `{"b":` + deep + `,"a":2}`, []memberSpan{{"b", deep}, {"a", "2"}}},
	}
	var c Canonicalizer // reused: buffers carry over from test to test
	for _, tt := range tests {
		src := []byte("  ," + tt.in + ",  ")
		var got []memberSpan
		dst, end, err := c.AppendValue([]byte("x"), src, 3, func(name string, start, end int) error {
			got = append(got, memberSpan{name, string(src[start:end])})
			return nil
		})
		want, werr := Canonicalize([]byte(tt.in))
		if err != nil || werr != nil || string(dst) != "x"+string(want) {
			t.Errorf("%s: AppendValue = %q, %v; want %q (%v)", tt.name, dst, err, "x"+string(want), werr)
		}
		if wantEnd := 3 + len(strings.TrimRight(tt.in, " ")); end != wantEnd {
			t.Errorf("%s: end = %d, want %d", tt.name, end, wantEnd)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: members %q, want %q", tt.name, got, tt.want)
		}
		sum, hend, err := c.HashValue(src, 3, nil)
		if h, _ := Hash([]byte(tt.in)); err != nil || sum != h || hend != end {
			t.Errorf("%s: HashValue = %s, %d, %v; want %s, %d", tt.name, sum, hend, err, h, end)
		}
	}
}

func TestCanonicalizer_MembersErrorStops(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	var c Canonicalizer
	calls := 0
	_, _, err := c.AppendValue(nil, []byte(`{"a":1,"b":2,"c":3}`), 0, func(name string, _, _ int) error {
		calls++
		if name == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("err = %v after %d calls, want the members error after 2", err, calls)
	}
}

// FuzzAppendCanonical checks AppendCanonical, the one-pass canonicalizer
// for text known to be I-JSON, against Canonicalize: for every text Parse
// accepts, both write the same bytes. On other text it must not panic.
func FuzzAppendCanonical(f *testing.F) {
	for _, in := range fastInputs(f) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, err := Canonicalize(raw)
		if err != nil {
			_, _ = AppendCanonical(nil, raw) // unspecified, but no panic
			return
		}
		got, err := AppendCanonical(nil, raw)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("AppendCanonical(%q) = %q, %v; Canonicalize writes %q", raw, got, err, want)
		}
	})
}

// checkedRefusals are JSON texts Parse refuses as I-JSON, each for a
// reason a checked Canonicalizer must find itself.
var checkedRefusals = []struct {
	text string
	want error
}{
	{`{"a":1,"b":2,"a":3}`, ErrDuplicateKey},
	{`{"x":{"a":1,"\u0061":2}}`, ErrDuplicateKey},
	{`[{"k":[{"d":1,"d":1}]}]`, ErrDuplicateKey},
	{`"\ud800"`, ErrLoneSurrogate},
	{`"\udc00\ud800"`, ErrLoneSurrogate},
	{`"a\ud83dx"`, ErrLoneSurrogate},
	{`"\ud83d\u0041"`, ErrLoneSurrogate},
	{`{"\ud800":1}`, ErrLoneSurrogate},
	{`[1e400]`, ErrNumberRange},
	{`{"n":-1e309}`, ErrNumberRange},
}

// TestCanonicalizer_CheckedRefusesWhatParseRefuses: on JSON text, a
// checked Canonicalizer fails exactly where Parse does, for the same
// reason, and writes what Canonicalize writes everywhere else.
func TestCanonicalizer_CheckedRefusesWhatParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range checkedRefusals {
		if _, err := Parse([]byte(tc.text)); !errors.Is(err, tc.want) {
			t.Fatalf("%s: Parse says %v, want %v", tc.text, err, tc.want)
		}
		c := Canonicalizer{Checked: true}
		if _, _, err := c.AppendValue(nil, []byte(tc.text), 0, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: checked canonicalizer says %v, want %v", tc.text, err, tc.want)
		}
	}
	for _, in := range append(fastInputs(t), `"\\ud800"`, `"\ud83d\ude00"`, `{"\\udc00":1}`) {
		want, err := Canonicalize([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		c := Canonicalizer{Checked: true}
		if got, _, err := c.AppendValue(nil, []byte(in), 0, nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%.80s: %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzCanonicalizerChecked: on any UTF-8 JSON text, a checked Canonicalizer
// refuses what Parse refuses and otherwise writes what Canonicalize writes.
func FuzzCanonicalizerChecked(f *testing.F) {
	for _, in := range fastInputs(f) {
		f.Add([]byte(in))
	}
	for _, tc := range checkedRefusals {
		f.Add([]byte(tc.text))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || !utf8.Valid(raw) {
			return
		}
		want, werr := Canonicalize(raw)
		c := Canonicalizer{Checked: true}
		got, end, err := c.AppendValue(nil, raw, 0, nil)
		if err == nil && c.w.Space(end) != len(raw) {
			t.Fatalf("%q: stopped at %d", raw, end)
		}
		switch {
		case werr != nil && err == nil:
			t.Fatalf("%q: Parse refuses it (%v), the checked canonicalizer writes %q", raw, werr, got)
		case werr == nil && (err != nil || !bytes.Equal(got, want)):
			t.Fatalf("%q: %q, %v; Canonicalize writes %q", raw, got, err, want)
		}
	})
}

func BenchmarkAppendCanonical(b *testing.B) {
	for _, bc := range benchInputs(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.in)))
			var dst []byte
			for b.Loop() {
				var err error
				if dst, err = AppendCanonical(dst[:0], bc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
