package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store"
)

// BlobReader reads content-addressed blobs back, checking their digest;
// *blobstore.Store satisfies it.
type BlobReader interface {
	GetContent(ctx context.Context, key, sha string) (io.ReadCloser, error)
}

// CallBodies are a recorded call's bodies as read back (SPEC §4.8). A nil
// member was not captured (or, for Forwarded, never sent upstream).
type CallBodies struct {
	// Request is the body the agent sent, JSON-equal: its members in its
	// order with its values, messages in canonical form (RFC 8785).
	Request json.RawMessage
	// Forwarded is the body sent upstream, byte for byte: the policy's
	// model, its sampling overrides and the stream options the gateway set.
	Forwarded json.RawMessage
	// Response is the upstream's answer, a stream reassembled into one
	// chat.completion object. An answer that is not JSON (an upstream's
	// error page) is a JSON string of its text.
	Response json.RawMessage
	// Resolved are, for a Responses request with a previous_response_id,
	// the canonical items that id stood for in the rollout (earlier
	// calls' input and output, SPEC §6.1); nil otherwise.
	Resolved []json.RawMessage
}

// NotForwarded reports whether a call recorded with reason was refused
// before anything went upstream, so it has no forwarded body even though
// the gateway built one (to fingerprint it).
func NotForwarded(reason *string) bool {
	return reason != nil && *reason == ReasonBudgetExhausted
}

// BodyReader rebuilds recorded calls' bodies from the blob store for one
// tenant. It keeps the message blobs it has read, since the calls of one
// conversation resend its history; use one per answer, not longer.
type BodyReader struct {
	blobs    BlobReader
	base     string
	messages map[string][]byte
}

// NewBodyReader returns a BodyReader of the tenant's recorded bodies.
func NewBodyReader(blobs BlobReader, tenantID string) *BodyReader {
	return &BodyReader{blobs: blobs, base: "gateway/" + tenantID + "/", messages: map[string][]byte{}}
}

// Read rebuilds the bodies of one of the tenant's recorded calls.
func (r *BodyReader) Read(ctx context.Context, c store.GatewayRecord) (CallBodies, error) {
	var out CallBodies
	if c.RequestBlob != nil {
		doc, err := r.requestDoc(ctx, *c.RequestBlob)
		if err != nil {
			return out, err
		}
		fwd, err := r.forwarded(ctx, doc)
		if err != nil {
			return out, err
		}
		if out.Request, err = agentRequest(fwd, doc); err != nil {
			return out, fmt.Errorf("call %s: %w", c.ID, err)
		}
		if !NotForwarded(c.Reason) {
			out.Forwarded = fwd
		}
		if len(doc.Resolved) > 0 {
			items, err := r.messageBlobs(ctx, doc.Resolved)
			if err != nil {
				return out, err
			}
			out.Resolved = make([]json.RawMessage, len(items))
			for i, it := range items {
				out.Resolved[i] = it
			}
		}
	}
	if c.ResponseBlob != nil {
		b, err := r.get(ctx, *c.ResponseBlob, "responses/")
		if err != nil {
			return out, err
		}
		out.Response = asJSON(b)
	}
	return out, nil
}

// get reads a blob whose key, minted by the recorder, is base + kind +
// its SHA-256; any other key is not this tenant's.
func (r *BodyReader) get(ctx context.Context, key, kind string) ([]byte, error) {
	sha, ok := strings.CutPrefix(key, r.base+kind)
	if !ok || !blobstore.ValidSHA256(sha) {
		return nil, fmt.Errorf("recorded blob key %q is not a %s blob of the tenant", key, strings.TrimSuffix(kind, "/"))
	}
	rc, err := r.blobs.GetContent(ctx, key, sha)
	if err != nil {
		return nil, fmt.Errorf("read recorded blob: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read recorded blob %s: %w", key, err)
	}
	return b, nil
}

func (r *BodyReader) requestDoc(ctx context.Context, key string) (requestDoc, error) {
	var doc requestDoc
	b, err := r.get(ctx, key, "requests/")
	if err != nil {
		return doc, err
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, fmt.Errorf("recorded request %s: %w", key, err)
	}
	if doc.Format != requestDocFormat {
		return doc, fmt.Errorf("recorded request %s: format %q, want %q", key, doc.Format, requestDocFormat)
	}
	return doc, nil
}

// messageBlobs reads message blobs by their SHA-256.
func (r *BodyReader) messageBlobs(ctx context.Context, shas []string) ([][]byte, error) {
	out := make([][]byte, len(shas))
	for i, sha := range shas {
		m, ok := r.messages[sha]
		if !ok {
			var err error
			if m, err = r.get(ctx, r.base+"messages/"+sha, "messages/"); err != nil {
				return nil, err
			}
			r.messages[sha] = m
		}
		out[i] = m
	}
	return out, nil
}

// forwarded rebuilds the forwarded body: head + "[" + the messages joined
// by "," + "]" + tail (see requestDoc).
func (r *BodyReader) forwarded(ctx context.Context, doc requestDoc) ([]byte, error) {
	msgs := make([][]byte, len(doc.Messages))
	n := len(doc.Head) + len(doc.Tail) + 2 + len(msgs)
	for i, sha := range doc.Messages {
		m, ok := r.messages[sha]
		if !ok {
			var err error
			if m, err = r.get(ctx, r.base+"messages/"+sha, "messages/"); err != nil {
				return nil, err
			}
			r.messages[sha] = m
		}
		msgs[i] = m
		n += len(m)
	}
	b := make([]byte, 0, n)
	b = append(b, doc.Head...)
	switch doc.Items {
	case itemsArray:
		b = append(b, '[')
		b = append(b, bytes.Join(msgs, []byte(","))...)
		b = append(b, ']')
	case itemsValue:
		if len(msgs) != 1 {
			return nil, fmt.Errorf("recorded request: a value item with %d messages", len(msgs))
		}
		b = append(b, msgs[0]...)
	case itemsNone:
	default:
		return nil, fmt.Errorf("recorded request: unknown items shape %q", doc.Items)
	}
	b = append(b, doc.Tail...)
	return b, nil
}

// agentRequest undoes the gateway's changes to a forwarded body: the
// members it added go, the ones it replaced get the agent's values back.
// Every other member keeps its place and bytes.
func agentRequest(fwd []byte, doc requestDoc) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(fwd))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("the forwarded body is not a JSON object")
	}
	added := make(map[string]bool, len(doc.Added))
	for _, k := range doc.Added {
		added[k] = true
	}
	var b bytes.Buffer
	b.Grow(len(fwd))
	b.WriteByte('{')
	first := true
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("the forwarded body: %w", err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("the forwarded body: member %q: %w", key, err)
		}
		if added[key] {
			continue
		}
		if v, ok := doc.Agent[key]; ok {
			val = v
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeKey(&b, key)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// asJSON returns b when it is one JSON value, else b's text as a JSON
// string.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b)) // a string always marshals
	return s
}

// ATIFRecord is a recorded call with its bodies as atif.FromGateway reads
// it: the request the agent sent, the response, the usage and cost.
func ATIFRecord(c store.GatewayCall, b CallBodies) atif.GatewayRecord {
	r := atif.GatewayRecord{Seq: int64(c.Seq), Counted: c.Counted, Request: b.Request, Response: b.Response,
		ReceivedAt: c.ReceivedAt}
	if c.Model != nil {
		r.Model = *c.Model
	}
	if c.DoneAt != nil {
		r.DoneAt = *c.DoneAt
	}
	if p := Protocol(c.Protocol); p != "" && p != ProtocolChat {
		// Another protocol's usage names its token kinds its own way;
		// input counts cached (and cache-written) tokens, as chat's
		// prompt_tokens does.
		if spec := specFor(p); spec != nil {
			if t, ok := spec.tokens(c.Usage); ok {
				in, cached, out := int(t.input), int(t.cached), int(t.output)
				r.Usage.PromptTokens, r.Usage.CachedTokens, r.Usage.CompletionTokens = &in, &cached, &out
			}
		}
		r.Usage.CostUSD = c.CostUSD
		return r
	}
	var u struct {
		PromptTokens        *int `json:"prompt_tokens"`
		CompletionTokens    *int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if len(c.Usage) > 0 && json.Unmarshal(c.Usage, &u) == nil {
		r.Usage.PromptTokens, r.Usage.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			r.Usage.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	r.Usage.CostUSD = c.CostUSD
	return r
}
