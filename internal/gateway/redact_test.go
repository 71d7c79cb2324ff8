package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
)

// The harness's upstream key, and the key of a second upstream no policy
// routes to: an upstream may sit in front of another and echo its key.
const (
	stubKey   = "upstream-secret-key-0123456789"
	secondKey = "second-upstream-key-abcdef012345"
)

// keyFragment is the first 16 bytes of the key: a stream that spells the
// key across events is cut before the agent has them.
var keyFragment = stubKey[:16]

// TestGateway_UpstreamKeysNeverReachTheAgentOrTheStore drives upstreams
// that echo the credential they received (and another upstream's key) in
// every place an answer has, and checks what the agent receives — status,
// headers, body — and every byte stored under the data directory.
func TestGateway_UpstreamKeysNeverReachTheAgentOrTheStore(t *testing.T) {
	t.Parallel()
	type want struct {
		status  int
		counted bool
		reason  string
		// text is what the agent reads: the answer's content, the joined
		// stream content, or the error message.
		text string
		// stored is the content of the stored (reassembled) answer.
		stored string
	}
	for _, tc := range []struct {
		name    string
		stream  bool
		handler func(w http.ResponseWriter, r *http.Request, body []byte)
		want    want
	}{
		{"in a whole answer's body", false, func(w http.ResponseWriter, r *http.Request, body []byte) {
			answerText(w, body, "you sent "+r.Header.Get("Authorization")+"; the other is "+secondKey)
		}, want{200, true, "", "you sent Bearer [redacted]; the other is [redacted]", "you sent Bearer [redacted]; the other is [redacted]"}},
		{"in a header", false, func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("X-Ratelimit-Echo", r.Header.Get("Authorization"))
			w.Header().Add("X-Ratelimit-Echo", secondKey)
			answerText(w, body, "hello")
		}, want{200, true, "", "hello", "hello"}},
		{"in an error body", false, func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`,
				r.Header.Get("Authorization"))
		}, want{401, false, gateway.ReasonUpstreamError, "Incorrect API key provided: Bearer [redacted]", "Incorrect API key provided: Bearer [redacted]"}},
		{"in a stream event split across writes", true, func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			sse(w, chunkJSON(`{"role":"assistant","content":""}`, ""))
			ev := "data: " + chunkJSON(`{"content":"`+r.Header.Get("Authorization")+`"}`, "") + "\n\n"
			cut := strings.Index(ev, stubKey) + 10
			for _, part := range []string{ev[:cut], ev[cut:]} {
				_, _ = io.WriteString(w, part)
				w.(http.Flusher).Flush()
			}
			sse(w, chunkJSON(`{}`, "stop"))
			sse(w, "[DONE]")
		}, want{200, true, "", "Bearer [redacted]", "Bearer [redacted]"}},
		{"spelled across stream events", true, func(w http.ResponseWriter, r *http.Request, body []byte) {
			auth := r.Header.Get("Authorization")
			var pieces []string
			for len(auth) > 0 {
				n := min(5, len(auth))
				pieces = append(pieces, auth[:n])
				auth = auth[n:]
			}
			streamText(w, body, pieces, false)
		}, want{200, false, gateway.ReasonUpstreamCredential, "Bearer upstream-secr", "Bearer upstream-secr"}},
		{"in a stream's error event", true, func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			sse(w, `{"error":{"message":"upstream rejected `+r.Header.Get("Authorization")+`","type":"server_error"}}`)
		}, want{200, false, gateway.ReasonUpstreamError, "upstream rejected Bearer [redacted]", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachEngine(t, func(t *testing.T, eng engine) {
				h := newHarness(t, eng, harnessOpts{gw: gateway.Config{Upstreams: []gateway.Upstream{{
					Name: "second", BaseURL: "http://127.0.0.1:9/v1", AllowPrivate: true, APIKey: secondKey,
				}}}})
				h.up.set(tc.handler)
				rr := h.rollout(`,"policy":"p1"`)
				var got response
				if tc.stream {
					resp, err := h.postStream(rr)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					got = response{status: resp.StatusCode, header: resp.Header, body: b}
				} else {
					got = h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", rr.APIKey,
						[]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
				}
				received := string(got.body)
				for name, vs := range got.header {
					received += "\n" + name + ": " + strings.Join(vs, ", ")
				}
				for _, secret := range []string{stubKey, secondKey, keyFragment} {
					if strings.Contains(received, secret) {
						t.Errorf("the agent received %q:\n%s", secret, received)
					}
				}
				if got.status != tc.want.status {
					t.Errorf("status %d, want %d", got.status, tc.want.status)
				}
				if text := agentText(t, got.body, tc.stream); text != tc.want.text {
					t.Errorf("the agent read %q, want %q", text, tc.want.text)
				}
				if tc.name == "in a header" {
					if vs := got.header.Values("X-Ratelimit-Echo"); len(vs) != 2 || vs[0] != "Bearer [redacted]" || vs[1] != "[redacted]" {
						t.Errorf("echoed header = %q", vs)
					}
				}

				h.flush()
				calls := h.calls(rr.RolloutID)
				if len(calls) != 1 {
					t.Fatalf("%d calls recorded, want 1", len(calls))
				}
				c := calls[0]
				reason := ""
				if c.Reason != nil {
					reason = *c.Reason
				}
				if c.Counted != tc.want.counted || reason != tc.want.reason {
					t.Errorf("recorded counted %v reason %q, want %v %q", c.Counted, reason, tc.want.counted, tc.want.reason)
				}
				if c.ResponseBlob == nil {
					t.Fatal("no response stored")
				}
				if stored := agentText(t, h.blob(*c.ResponseBlob), false); stored != tc.want.stored {
					t.Errorf("stored answer reads %q, want %q", stored, tc.want.stored)
				}
				for _, secret := range []string{stubKey, secondKey, keyFragment} {
					if where := filesHolding(t, h.dir, secret); len(where) > 0 {
						t.Errorf("%q is stored in %v", secret, where)
					}
				}
			})
		})
	}
}

// agentText is what a client reads of an answer: the first choice's
// content, a stream's joined content (or its error event's message), or
// an error's message.
func agentText(t *testing.T, body []byte, stream bool) string {
	t.Helper()
	type shape struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
			Delta   struct{ Content string } `json:"delta"`
		} `json:"choices"`
		Error *struct{ Message string } `json:"error"`
	}
	if !stream {
		var s shape
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		if s.Error != nil {
			return s.Error.Message
		}
		if len(s.Choices) == 0 {
			return ""
		}
		return s.Choices[0].Message.Content
	}
	var text strings.Builder
	var errMsg string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var s shape
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if s.Error != nil && errMsg == "" {
			errMsg = s.Error.Message
		}
		for _, c := range s.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if errMsg != "" && text.Len() == 0 {
		return errMsg
	}
	return text.String()
}

// filesHolding lists the files under dir (the SQLite database and the
// blobs) whose bytes hold s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
