package gateway

import (
	"net/http"
	"strings"
	"testing"
)

const (
	testKey      = "sk-proj-Abc123Def456Ghi789Jkl012"
	testOtherKey = "other/upstream+key=0123456789"
)

func testRedactor(t testing.TB) *redactor {
	t.Helper()
	r := newRedactor([]Upstream{{Name: "a", APIKey: testKey}, {Name: "b", APIKey: testOtherKey}, {Name: "c", APIKey: "EMPTY"}, {Name: "d"}})
	if r == nil {
		t.Fatal("no redactor for two keys")
	}
	return r
}

func TestRedact_EveryConfiguredKeyEveryForm(t *testing.T) {
	t.Parallel()
	r := testRedactor(t)
	for _, tc := range []struct{ name, in, want string }{
		{"no key: unchanged", `{"content":"hello"}`, `{"content":"hello"}`},
		{"the answering upstream's key", `{"error":{"message":"bad key Bearer ` + testKey + `"}}`, `{"error":{"message":"bad key Bearer [redacted]"}}`},
		{"another upstream's key", `{"echo":"` + testOtherKey + `"}`, `{"echo":"[redacted]"}`},
		{`a key written with \/ for /`, `{"echo":"other\/upstream+key=0123456789"}`, `{"echo":"[redacted]"}`},
		{"every occurrence", testKey + " and " + testKey, "[redacted] and [redacted]"},
		{"a short placeholder key is not a secret", `{"content":"EMPTY"}`, `{"content":"EMPTY"}`},
		{"a prefix alone is not the key", `{"content":"sk-proj-Abc"}`, `{"content":"sk-proj-Abc"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(r.redact([]byte(tc.in))); got != tc.want {
				t.Errorf("redact(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedact_NoKeysNoRedactor(t *testing.T) {
	t.Parallel()
	r := newRedactor([]Upstream{{Name: "a"}, {Name: "b", APIKey: "EMPTY"}})
	if r != nil {
		t.Fatalf("a redactor without a key worth redacting: %+v", r)
	}
	b := []byte("Bearer EMPTY")
	if got := r.redact(b); string(got) != "Bearer EMPTY" {
		t.Errorf("nil redactor changed %q", got)
	}
	if r.newScreen().spells([]byte(`{"content":"x"}`)) {
		t.Error("nil screen reported a key")
	}
}

func TestRedact_HeaderValues(t *testing.T) {
	t.Parallel()
	r := testRedactor(t)
	h := http.Header{"X-Ratelimit-Echo": {"Bearer " + testKey, "fine"}, "Content-Type": {"application/json"}}
	r.redactHeader(h)
	if got := h.Values("X-Ratelimit-Echo"); len(got) != 2 || got[0] != "Bearer [redacted]" || got[1] != "fine" {
		t.Errorf("header = %q", got)
	}
	if h.Get("Content-Type") != "application/json" {
		t.Errorf("content type changed: %q", h.Get("Content-Type"))
	}
}

func TestRedact_EventRawAndData(t *testing.T) {
	t.Parallel()
	r := testRedactor(t)
	raw := []byte("data: {\"content\":\"" + testKey + "\"}\n\n")
	data := []byte("{\"content\":\"" + testKey + "\"}")
	raw, data = r.redactEvent(raw, data)
	if string(raw) != "data: {\"content\":\"[redacted]\"}\n\n" || string(data) != `{"content":"[redacted]"}` {
		t.Errorf("raw %q data %q", raw, data)
	}
}

// chunkWith is a chat.completion.chunk whose content is the JSON string s.
func chunkWith(index int, s string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":` + string(rune('0'+index)) +
		`,"delta":{"content":` + s + `},"finish_reason":null}]}`
}

func toolChunk(s string) string {
	return `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + s + `}}]}}]}`
}

// TestScreen_StreamIsCutBeforeItSpellsAKey checks the rule of the stream
// screen: the event that makes a member's text spell the first
// screenPrefix bytes of a key (all of a shorter key) is the one withheld,
// whatever the pieces, and text that only resembles a key passes.
func TestScreen_StreamIsCutBeforeItSpellsAKey(t *testing.T) {
	t.Parallel()
	r := testRedactor(t)
	k := testKey
	for _, tc := range []struct {
		name   string
		events []string
		cutAt  int // index of the event withheld; -1: none
	}{
		{"ordinary text", []string{chunkWith(0, `"Hello, "`), chunkWith(0, `"world"`)}, -1},
		{"the public prefix only", []string{chunkWith(0, `"keys look like sk-proj-"`), chunkWith(0, `"…"`)}, -1},
		{"split in two", []string{chunkWith(0, `"Bearer `+k[:10]+`"`), chunkWith(0, `"`+k[10:]+`"`)}, 1},
		{"one byte per event", func() []string {
			var evs []string
			for i := range len(k) {
				evs = append(evs, chunkWith(0, `"`+k[i:i+1]+`"`))
			}
			return evs
		}(), screenPrefix - 1},
		{"pieces with other members between", []string{
			chunkWith(0, `"x`+k[:6]+`"`), `{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1}}`, chunkWith(0, `"`+k[6:20]+`"`),
		}, 2},
		{"escaped pieces", []string{chunkWith(0, `"\u0073k-proj-"`), chunkWith(0, `"Abc123\u0044ef"`)}, 1},
		{"the other key, with \\/", []string{chunkWith(0, `"other\/upstream+"`), chunkWith(0, `"key=01"`)}, 1},
		{"in tool call arguments", []string{toolChunk(`"{\"k\":\"` + k[:9] + `"`), toolChunk(`"` + k[9:18] + `\"}"`)}, 1},
		{"choices interleaved", []string{
			chunkWith(0, `"`+k[:8]+`"`), chunkWith(1, `"zzzzzzzz"`), chunkWith(0, `"`+k[8:16]+`"`),
		}, 2},
		{"a false start then the key", []string{chunkWith(0, `"sk-proj-sk-proj-Abc"`), chunkWith(0, `"123Def456"`)}, 1},
		{"a near miss", []string{chunkWith(0, `"`+k[:15]+`"`), chunkWith(0, `"!`+k[16:]+`"`)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := r.newScreen()
			got := -1
			for i, ev := range tc.events {
				if s.spells(r.redact([]byte(ev))) {
					got = i
					break
				}
			}
			if got != tc.cutAt {
				t.Errorf("withheld event %d, want %d", got, tc.cutAt)
			}
		})
	}
}

func TestScreen_ShortKeyIsCutOnlyWhenWhole(t *testing.T) {
	t.Parallel()
	r := newRedactor([]Upstream{{Name: "a", APIKey: "token-abc123"}})
	s := r.newScreen()
	if s.spells([]byte(chunkWith(0, `"the token-"`))) || s.spells([]byte(chunkWith(0, `"abc12"`))) {
		t.Fatal("cut before the whole short key was spelled")
	}
	if !s.spells([]byte(chunkWith(0, `"3"`))) {
		t.Error("the whole short key passed")
	}
	if !strings.Contains(string(r.redact([]byte("x token-abc123 y"))), RedactedMark) {
		t.Error("a short key of 8 bytes or more is not redacted")
	}
}

// BenchmarkRedactEvent measures what redaction adds per stream event: the
// literal search of each key's forms and the stream screen.
func BenchmarkRedactEvent(b *testing.B) {
	r := testRedactor(b)
	data := []byte(`{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{"content":"word17 "},"logprobs":null,"finish_reason":null}]}`)
	raw := append(append([]byte("data: "), data...), '\n', '\n')
	s := r.newScreen()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		rw, d := r.redactEvent(raw, data)
		if s.spells(d) || len(rw) != len(raw) {
			b.Fatal("an ordinary event was cut or changed")
		}
	}
}

// FuzzScreen feeds the stream screen arbitrary event data: it must never
// panic, and whatever came before, an event holding a whole key never
// passes.
func FuzzScreen(f *testing.F) {
	f.Add([]byte(chunkWith(0, `"hello"`)), []byte(chunkWith(0, `"`+testKey[:9]+`"`)))
	f.Add([]byte(`{"a":"\u00`), []byte(`"\`))
	f.Add([]byte(toolChunk(`"{\"k\":\"sk-"`)), []byte(`{"index":99999999999,"content":"proj-Abc123Def456Ghi"}`))
	r := newRedactor([]Upstream{{Name: "a", APIKey: testKey}})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		s := r.newScreen()
		if s.spells(first) || s.spells(second) {
			return // cut already
		}
		if !s.spells([]byte(`{"content":"x` + testKey + `"}`)) {
			t.Fatal("a whole key in one string passed the screen")
		}
	})
}
