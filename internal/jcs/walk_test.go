package jcs

import (
	"errors"
	"slices"
	"testing"
)

func TestWalker_Members(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []memberSpan // each member's name and value text
		wantEnd int          // offset past the object; -1 for an error
	}{
		{"members in text order", ` { "b" : 1 , "a":[1,{"x":"}"}] ,"c":{"d":"\"{"}} x`,
			[]memberSpan{{"b", "1"}, {"a", `[1,{"x":"}"}]`}, {"c", `{"d":"\"{"}`}}, 48},
		{"empty object", `{}`, nil, 2},
		{"escaped names", `{"\u0061\n":true,"\\":null}`, []memberSpan{{"a\n", "true"}, {`\`, "null"}}, 27},
		{"not an object", `[1]`, nil, -1},
		{"empty text", ``, nil, -1},
		{"name not a string", `{a:1}`, nil, -1},
		{"no colon", `{"a" 1}`, nil, -1},
		{"no comma", `{"a":1 "b":2}`, []memberSpan{{"a", "1"}}, -1},
		{"unterminated", `{"a":1,`, []memberSpan{{"a", "1"}}, -1},
		{"unterminated string", `{"a":"x}`, nil, -1},
		{"unterminated object", `{"a":{"b":1}`, []memberSpan{{"a", `{"b":1}`}}, -1},
	}
	for _, tt := range tests {
		w := NewWalker([]byte(tt.in))
		var got []memberSpan
		end, err := w.Members(0, func(name string, start int) (int, error) {
			end, err := w.Skip(start)
			if err == nil {
				got = append(got, memberSpan{name, tt.in[start:end]})
			}
			return end, err
		})
		if tt.wantEnd < 0 {
			if err == nil {
				t.Errorf("%s: Members(%q) = %d, want an error", tt.name, tt.in, end)
			}
		} else if err != nil || end != tt.wantEnd {
			t.Errorf("%s: Members(%q) = %d, %v; want %d", tt.name, tt.in, end, err, tt.wantEnd)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: members %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestWalker_StopsWithTheCallersError(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	w := NewWalker([]byte(`{"a":1,"b":[2,3],"c":garbage`))
	var names []string
	_, err := w.Members(0, func(name string, start int) (int, error) {
		names = append(names, name)
		end, err := w.Skip(start)
		if name == "b" {
			return end, stop
		}
		return end, err
	})
	if err != stop || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("Members stopped with %v after %q, want the callback's error after a, b", err, names)
	}
	_, err = w.Elements(11, func(start int) (int, error) { return start, stop })
	if err != stop {
		t.Fatalf("Elements stopped with %v, want the callback's error", err)
	}
}

func TestWalker_Elements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []string
		wantEnd int // -1 for an error
	}{
		{` [ 1 , "a,]" , [2,[3]] , {"k":"]"} , null ] `, []string{"1", `"a,]"`, "[2,[3]]", `{"k":"]"}`, "null"}, 43},
		{`[]`, nil, 2},
		{`[ ]`, nil, 3},
		{`{}`, nil, -1},
		{`[1 2]`, []string{"1"}, -1},
		{`[1,`, []string{"1"}, -1},
		{`[,]`, nil, -1},
	}
	for _, tt := range tests {
		w := NewWalker([]byte(tt.in))
		var got []string
		end, err := w.Elements(0, func(start int) (int, error) {
			end, err := w.Skip(start)
			if err == nil {
				got = append(got, tt.in[start:end])
			}
			return end, err
		})
		if tt.wantEnd < 0 {
			if err == nil {
				t.Errorf("Elements(%q) = %d, want an error", tt.in, end)
			}
		} else if err != nil || end != tt.wantEnd {
			t.Errorf("Elements(%q) = %d, %v; want %d", tt.in, end, err, tt.wantEnd)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Elements(%q) saw %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWalker_String(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{`"plain é"`, "plain é", true},
		{`"a\"b\\c\/d\n\u00e9\ud83d\ude00"`, "a\"b\\c/d\né😀", true},
		{`""`, "", true},
		{`"\\"`, `\`, true},
		{`1`, "", false},
		{`"`, "", false},
		{`"\x"`, "", false},
	}
	for _, tt := range tests {
		w := NewWalker([]byte(tt.in))
		got, err := w.String(0, len(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("String(%q) = %q, %v; want %q (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		if end, err := w.Skip(0); tt.ok && (err != nil || end != len(tt.in)) {
			t.Errorf("Skip(%q) = %d, %v; want %d", tt.in, end, err, len(tt.in))
		}
	}
}
