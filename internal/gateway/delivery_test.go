package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// servers are the two ways the gateway can be served: through gyre's
// server, which watches each connection's writes (gateway.DeliveryListener),
// and through a plain http.Server, where the gateway flushes [DONE] itself.
var servers = []struct {
	name  string
	plain bool
}{{"delivery", false}, {"plain", true}}

// TestGateway_DoneTravelsWithTheEndOfTheBody: served as gyre serve serves
// (api.Server.Serve), a stream's [DONE] goes out in the same write as the
// end of the chunked body, so an SDK that stops reading at [DONE]
// (openai-go does) has the whole response and can reuse its connection,
// and one that reads to the end does not wait for a second write. Each
// stream still counts, the rollout's first completion (durable before
// [DONE]) included.
func TestGateway_DoneTravelsWithTheEndOfTheBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	var g gates
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) { streamFirstAlone(w, g.current()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writes := &writeLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.srv.Serve(ctx, writeLogListener{ln, writes}); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rr := h.rollout(`,"policy":"p1"`)
	rr.LLMURL = "http://" + ln.Addr().String() + "/gw/" + gatewayToken(rr) + "/v1"
	cl := h.client(rr, option.WithHTTPClient(&http.Client{}))
	const n = 5
	for i := range n {
		next := g.open()
		stream := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		var text strings.Builder
		for stream.Next() {
			if ch := stream.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
			}
			if next != nil {
				close(next) // the first event is here: the rest may come
				next = nil
			}
		}
		if err := stream.Err(); err != nil || text.String() != "ab" {
			t.Fatalf("stream %d: %q, %v", i, text.String(), err)
		}
	}
	var withDone int
	for _, w := range writes.all() {
		if bytes.Contains(w, []byte("data: [DONE]\n\n")) {
			withDone++
			if !bytes.HasSuffix(w, []byte("\r\n0\r\n\r\n")) {
				t.Errorf("the write carrying [DONE] does not end the body: %q", w)
			}
		}
	}
	if withDone != n {
		t.Errorf("%d writes carried [DONE], want %d", withDone, n)
	}
	v := waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == n })
	if v.Gateway.Completions != n {
		t.Errorf("%d of %d streams counted: %+v", v.Gateway.Completions, n, v.Gateway.Calls)
	}
	// The server's access log for each stream is written after its last
	// write, and written all the same.
	logged := 0
	for range 100 {
		logged = strings.Count(h.logs.String(), `"msg":"http request","method":"POST","route":"/gw/{token}/v1/chat/completions","status":200`)
		if logged == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if logged != n {
		t.Errorf("%d access log lines for %d streams:\n%s", logged, n, h.logs.String())
	}
}

// writeLog keeps every write made on a listener's connections.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) all() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

type writeLogListener struct {
	net.Listener
	log *writeLog
}

func (l writeLogListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeLogConn{c, l.log}, nil
}

type writeLogConn struct {
	net.Conn
	log *writeLog
}

func (c writeLogConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, bytes.Clone(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// TestGateway_StreamWhoseDoneIsNotWrittenDoesNotCount: when the write
// that carries [DONE] fails (the client went away at that moment), the
// stream was not delivered in full and does not count (SPEC §6.3), on
// either server.
func TestGateway_StreamWhoseDoneIsNotWrittenDoesNotCount(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, sqliteEngine, harnessOpts{plainServer: srv.plain, wrapListener: func(ln net.Listener) net.Listener {
				return failDoneListener{ln}
			}})
			var g gates
			h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) { streamFirstAlone(w, g.current()) })
			rr := h.rollout(`,"policy":"p1"`)
			// The rollout's first completion, made durable before [DONE],
			// and a later one, whose [DONE] goes out first.
			for i := range 2 {
				next := g.open()
				resp, err := h.postStream(rr)
				if err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(resp.Body)
				first, err := br.ReadString('\n') // the first event's data line
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				close(next)
				rest, err := io.ReadAll(br)
				got := first + string(rest)
				resp.Body.Close()
				if err == nil || !strings.Contains(got, `"content":"a"`) || strings.Contains(got, "[DONE]") {
					t.Fatalf("stream %d: the client read %q, %v; want the first event, then the connection lost", i, got, err)
				}
			}
			v := waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == 2 })
			for _, c := range v.Gateway.Calls {
				if c.Counted || deref(c.Reason) != "client_disconnected" {
					t.Errorf("call %d: counted %v, reason %v; want not counted, client_disconnected", c.Seq, c.Counted, deref(c.Reason))
				}
			}
		})
	}
}

// failDoneListener's connections fail every write that would carry
// [DONE], as if the client were gone, and then the connection.
type failDoneListener struct{ net.Listener }

func (l failDoneListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &failDoneConn{Conn: c}, nil
}

type failDoneConn struct {
	net.Conn
	failed atomic.Bool
}

func (c *failDoneConn) Write(p []byte) (int, error) {
	if c.failed.Load() || bytes.Contains(p, []byte("[DONE]")) {
		c.failed.Store(true)
		_ = c.Conn.Close()
		return 0, fmt.Errorf("write: %w", net.ErrClosed)
	}
	return c.Conn.Write(p)
}

// TestGateway_StreamsCountOnEitherServer: the streams that count and those
// that do not are the same whether [DONE] is flushed by the gateway or
// written with the end of the body.
func TestGateway_StreamsCountOnEitherServer(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, sqliteEngine, harnessOpts{plainServer: srv.plain})
			rr := h.rollout(`,"policy":"p1"`)
			path := "/gw/" + gatewayToken(rr) + "/v1/chat/completions"
			body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
			events := [][]string{
				{chunkJSON(`{"role":"assistant","content":"first"}`, "stop"), "[DONE]"},
				{chunkJSON(`{"role":"assistant","content":"half"}`, ""), "[DONE]"},
				{chunkJSON(`{"role":"assistant","content":"whole"}`, "stop"), "[DONE]"},
			}
			for i, evs := range events {
				h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
					startStream(w)
					for _, e := range evs {
						sse(w, e)
					}
				})
				r := h.do(http.MethodPost, path, rr.APIKey, body)
				if r.status != 200 || !strings.HasSuffix(string(r.body), "data: [DONE]\n\n") {
					t.Fatalf("stream %d: %d %q", i, r.status, r.body)
				}
			}
			v := waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == len(events) })
			var got []string
			for _, c := range v.Gateway.Calls {
				got = append(got, fmt.Sprintf("%v/%v", c.Counted, deref(c.Reason)))
			}
			if want := "true/<nil> false/stream_incomplete true/<nil>"; fmt.Sprint(strings.Join(got, " ")) != want {
				t.Errorf("calls %v, want %s", got, want)
			}
		})
	}
}

// TestGateway_UpstreamConnectionOutlivesTheStream: an upstream that ends
// its body in a write of its own after [DONE] (as servers that stream
// through ASGI do) keeps its connection to the gateway for the next call:
// the gateway reads the body to its end after relaying [DONE] instead of
// dropping the connection. An upstream that sends more than the end, or
// nothing for a long time, is cut off.
func TestGateway_UpstreamConnectionOutlivesTheStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	var (
		mu    sync.Mutex
		peers = map[string]bool{}
		ended = make(chan struct{}, 1)
	)
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		peers[r.RemoteAddr] = true
		mu.Unlock()
		startStream(w)
		sse(w, chunkJSON(`{"role":"assistant","content":"a"}`, "stop"))
		sse(w, "[DONE]")
		time.Sleep(5 * time.Millisecond) // the end of the body comes later
		ended <- struct{}{}
	})
	rr := h.rollout(`,"policy":"p1"`)
	cl := h.client(rr)
	for i := range 4 {
		stream := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		<-ended
		time.Sleep(50 * time.Millisecond) // for the gateway to read the end and pool the connection
	}
	mu.Lock()
	defer mu.Unlock()
	if len(peers) != 1 {
		t.Errorf("the gateway opened %d connections to the upstream for 4 streams, want 1", len(peers))
	}
}

// TestGateway_UpstreamThatLingersAfterDoneIsCutOff: reading an upstream's
// body past [DONE] is bounded: one that then sends nothing is cancelled
// after drainWait, one that sends on is cut off after drainBytes, and
// neither holds back the client or the count.
func TestGateway_UpstreamThatLingersAfterDoneIsCutOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(w http.ResponseWriter)
	}{
		{"silent", func(w http.ResponseWriter) {}},
		{"chatty", func(w http.ResponseWriter) {
			for range 64 {
				sse(w, ": "+strings.Repeat("x", 1024))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, sqliteEngine, harnessOpts{})
			cut := make(chan struct{})
			h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
				startStream(w)
				sse(w, chunkJSON(`{"role":"assistant","content":"a"}`, "stop"))
				sse(w, "[DONE]")
				tc.after(w)
				select {
				case <-r.Context().Done():
					close(cut)
				case <-time.After(10 * time.Second):
				}
			})
			rr := h.rollout(`,"policy":"p1"`)
			r := h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
				[]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
			if r.status != 200 || !strings.HasSuffix(string(r.body), "data: [DONE]\n\n") {
				t.Fatalf("%d %q", r.status, r.body)
			}
			select {
			case <-cut:
			case <-time.After(5 * time.Second):
				t.Fatal("the gateway kept reading the upstream's body")
			}
			v := waitCall(t, h, rr.RolloutID, func(v view) bool { return len(v.Gateway.Calls) == 1 })
			if !v.Gateway.Calls[0].Counted {
				t.Errorf("call %+v", v.Gateway.Calls[0])
			}
		})
	}
}
