package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// benchStream is an upstream stream of n content events, the finish
// event, the usage event the gateway asks for and [DONE].
func benchStream(n int) []byte {
	var b bytes.Buffer
	ev := func(delta, finish string) {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	ev(`{"role":"assistant","content":""}`, "null")
	for i := range n {
		ev(fmt.Sprintf(`{"content":"word%d "}`, i), "null")
	}
	ev(`{}`, `"stop"`)
	b.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkStreamRelay measures the gateway's own CPU per streamed
// answer (relay, key redaction, reassembly, record) without the network: the upstream
// body is in memory and the client a recorder. copy is the floor: what a
// bare proxy does with the same bytes (read, write, flush).
func BenchmarkStreamRelay(b *testing.B) {
	for _, n := range []int{1, 16} {
		events := benchStream(n)
		b.Run(fmt.Sprintf("gateway/events=%d", n), func(b *testing.B) {
			// An upstream key, as in production: every event is redacted
			// and screened for it.
			cfg := Config{Upstreams: []Upstream{{Name: "bench", BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-bench-0123456789abcdefghijklmnopqrstuv"}}}
			g, err := New(cfg, Deps{Store: &fakeStore{now: time.Now()}})
			if err != nil {
				b.Fatal(err)
			}
			rollout := "r1"
			g.rec.state(rollout).countedDurable = true // a later completion: [DONE] first
			b.ReportAllocs()
			for i := range b.N {
				w := httptest.NewRecorder()
				c := g.newCall(w, httptest.NewRequest(http.MethodPost, "/gw/t/v1/chat/completions", nil), routeChat, chatSpec{})
				c.rec.RolloutID = &rollout
				c.fwd = &forwarded{}
				c.stream(&http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
					Body: io.NopCloser(bytes.NewReader(events))})
				c.cancel(nil)
				if !c.rec.Counted {
					b.Fatalf("not counted: %s", w.Body)
				}
				if i%512 == 0 {
					g.rec.mu.Lock()
					g.rec.pending = nil
					g.rec.mu.Unlock()
				}
			}
		})
		b.Run(fmt.Sprintf("copy/events=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 32<<10)
			for range b.N {
				w := httptest.NewRecorder()
				r := bytes.NewReader(events)
				for {
					k, err := r.Read(buf)
					if k > 0 {
						_, _ = w.Write(buf[:k])
						w.Flush()
					}
					if err != nil {
						break
					}
				}
			}
		})
	}
}
