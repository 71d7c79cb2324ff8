package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"sync"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// memBlobs is an in-memory content-addressed blob store.
type memBlobs struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (b *memBlobs) Exists(_ context.Context, key string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[key]
	return ok, nil
}

func (b *memBlobs) PutContent(_ context.Context, prefix string, r io.Reader) (string, int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string][]byte{}
	}
	b.m[prefix+"/"+sha] = data
	return sha, int64(len(data)), nil
}

func (b *memBlobs) GetContent(_ context.Context, key, _ string) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.m[key]
	if !ok {
		return nil, errors.New("no blob " + key)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// memberKeys lists an object's top-level keys in order.
func memberKeys(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// TestBodyReader_RebuildsWhatWasSentAndForwarded: the stored request
// (message blobs + the rest) rebuilds the forwarded body byte for byte,
// and undoing the gateway's changes gives back what the agent sent —
// its members, in its order, with its values — whatever the policy
// replaced or added.
func TestBodyReader_RebuildsWhatWasSentAndForwarded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		pol  Policy
	}{
		{"model replaced", `{"model":"asked","messages":[{"role":"user","content":"hi"}]}`, Policy{Model: "served"}},
		{"no model sent: added", `{"messages":[{"role":"user","content":"hi"}]}`, Policy{Model: "served"}},
		{"override replaces and adds", `{"temperature": 0.2 ,"messages":[{"content":"hi","role":"user"}],"model":"m"}`,
			Policy{Model: "served", SamplingOverrides: map[string]json.RawMessage{"temperature": json.RawMessage(`1.0`), "seed": json.RawMessage(`7`)}}},
		{"stream options added", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, Policy{Model: "served"}},
		{"stream options replaced", `{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[]}`, Policy{Model: "served"}},
		{"stream options kept", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, Policy{Model: "served"}},
		{"token capture added", `{"model":"m","logprobs":false,"messages":[{"role":"system","content":[{"type":"text","text":"a"}]}]}`,
			Policy{Model: "served", CaptureTokens: true}},
		{"unknown members and unicode kept", `{"x-trace":{"n":[1, 2.50, "\u00e9\ud83d\ude00"]},"model":null,"messages":[{"role":"user","content":"\u2028"}],"\u00fc":1}`,
			Policy{Model: "served"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, e := parseChatRequest([]byte(tc.body))
			if e != nil {
				t.Fatal(e.Message)
			}
			fwd := req.forward(tc.pol)
			blobs := &memBlobs{}
			rec := &Recorder{blobs: blobs, log: telemetry.Discard()}
			p := &pendingRecord{rec: store.GatewayRecord{ID: "c1", TenantID: "t1"},
				body: &bodyParts{fwd: fwd, messages: req.messages}, response: []byte(`{"id":"x"}`)}
			if err := rec.storeBodies(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			got, err := NewBodyReader(blobs, "t1").Read(context.Background(), p.rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Forwarded, fwd.body) {
				t.Errorf("forwarded:\n got %s\nwant %s", got.Forwarded, fwd.body)
			}
			if !reflect.DeepEqual(jsonValue(t, got.Request), jsonValue(t, []byte(tc.body))) {
				t.Errorf("request is not what was sent:\n got %s\nwant %s", got.Request, tc.body)
			}
			if k, want := memberKeys(t, got.Request), memberKeys(t, []byte(tc.body)); !reflect.DeepEqual(k, want) {
				t.Errorf("request members %v, want the agent's order %v", k, want)
			}
			if string(got.Response) != `{"id":"x"}` {
				t.Errorf("response = %s", got.Response)
			}
			// Another tenant's reader refuses the keys: they are not its.
			if _, err := NewBodyReader(blobs, "t2").Read(context.Background(), p.rec); err == nil {
				t.Error("another tenant's reader read the bodies")
			}
			// A call refused before it went upstream has no forwarded body.
			refused := p.rec
			refused.Reason = new(string)
			*refused.Reason = ReasonBudgetExhausted
			got, err = NewBodyReader(blobs, "t1").Read(context.Background(), refused)
			if err != nil || got.Forwarded != nil || got.Request == nil {
				t.Errorf("budget-refused call: forwarded %s request %s (%v)", got.Forwarded, got.Request, err)
			}
		})
	}
}

// TestBodyReader_NonJSONResponseIsAString: an upstream's answer that is
// not JSON (an HTML error page) reads back as a JSON string of its text,
// so the list it appears in stays JSON.
func TestBodyReader_NonJSONResponseIsAString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"error":{"message":"x"}}`, `{"error":{"message":"x"}}`},
		{`<html>bad gateway</html>`, `"\u003chtml\u003ebad gateway\u003c/html\u003e"`},
		{``, `""`},
		{`{"a":1}{"b":2}`, `"{\"a\":1}{\"b\":2}"`},
	} {
		if got := string(asJSON([]byte(tc.in))); got != tc.want {
			t.Errorf("asJSON(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// FuzzBodyReader_RoundTrip: for every request the gateway accepts, the
// stored form rebuilds the forwarded body byte for byte and a request
// JSON-equal to what was sent, its members in the sent order.
func FuzzBodyReader_RoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"model":"asked","messages":[{"role":"user","content":"hi"}]}`,
		`{"temperature": 0.2 ,"stream":true,"stream_options":{"include_usage":false},"messages":[{"content":"hi","role":"user"}]}`,
		`{"x":{"n":[1, 2.50, "\u00e9"]},"model":null,"logprobs":false,"messages":[]}`,
	} {
		f.Add(s, true)
	}
	pols := []Policy{
		{Model: "served"},
		{Model: "served", CaptureTokens: true, SamplingOverrides: map[string]json.RawMessage{"temperature": json.RawMessage(`1.0`), "top_p": json.RawMessage(`0.5`)}},
	}
	f.Fuzz(func(t *testing.T, body string, capture bool) {
		req, e := parseChatRequest([]byte(body))
		if e != nil {
			return
		}
		pol := pols[0]
		if capture {
			pol = pols[1]
		}
		fwd := req.forward(pol)
		blobs := &memBlobs{}
		rec := &Recorder{blobs: blobs, log: telemetry.Discard()}
		p := &pendingRecord{rec: store.GatewayRecord{ID: "c1", TenantID: "t1"}, body: &bodyParts{fwd: fwd, messages: req.messages}}
		if err := rec.storeBodies(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		got, err := NewBodyReader(blobs, "t1").Read(context.Background(), p.rec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Forwarded, fwd.body) {
			t.Fatalf("forwarded:\n got %s\nwant %s", got.Forwarded, fwd.body)
		}
		if !reflect.DeepEqual(jsonValue(t, got.Request), jsonValue(t, []byte(body))) {
			t.Fatalf("request is not what was sent:\n got %s\nwant %s", got.Request, body)
		}
		if k, want := memberKeys(t, got.Request), memberKeys(t, []byte(body)); !reflect.DeepEqual(k, want) {
			t.Fatalf("request members %v, want %v", k, want)
		}
		if got.Response != nil {
			t.Fatalf("response %s, none was stored", got.Response)
		}
	})
}
