package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// recordedRoutes registers the reads of what gyre recorded (SPEC §4.8):
// gateway calls with their bodies, a rollout's trajectory, and blobs.
func (s *Server) recordedRoutes() {
	s.handle("GET /api/v1/rollouts/{id}/calls", reader, s.rolloutCalls)
	s.handle("GET /api/v1/rollouts/{id}/trajectory", reader, s.rolloutTrajectory)
	s.handle("GET /api/v1/calls", reader, s.productionCalls)
	s.handle("GET /api/v1/blobs/{sha256}", reader, s.getBlob)
}

// callProtocol is a recorded call's protocol as the API shows it: chat,
// responses or messages (a record from before protocols were recorded
// is chat).
func callProtocol(p string) string {
	if p == "" {
		return string(gateway.ProtocolChat)
	}
	return p
}

// errNoBodies answers the routes that read recorded bodies on a server
// without a blob store.
var errNoBodies = gyre.Errorf(gyre.CodeUnavailable, "this server has no blob store configured, so it holds no recorded bodies")

// rolloutCalls is GET /api/v1/rollouts/{id}/calls: the rollout's gateway
// calls with their bodies, in sequence order, a page at a time.
func (s *Server) rolloutCalls(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	calls, next, err := s.store.RolloutCalls(r.Context(), p.TenantID, id, pg)
	if err != nil {
		return err
	}
	return s.writeCalls(w, r, p.TenantID, calls, next, false)
}

// productionCalls is GET /api/v1/calls?agent_id&since: the tenant's
// production calls (the policy endpoint's traffic) in order of receipt.
func (s *Server) productionCalls(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	q, err := queryParams(r, "agent_id", "since", "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	var f store.CallFilter
	if v, ok := q["agent_id"]; ok {
		if !utf8.ValidString(v) {
			return gyre.Errorf(gyre.CodeInvalidQuery, "agent_id must be valid UTF-8")
		}
		if err := flywheel.ValidateAgentID(v); err != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "%s", turnsIDReason(err))
		}
		f.AgentID = v
	}
	if v, ok := q["since"]; ok {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "since must be an RFC 3339 date-time such as 2025-01-31T12:00:00Z")
		}
		f.Since = t
	}
	calls, next, err := s.store.ProductionCalls(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	return s.writeCalls(w, r, p.TenantID, calls, next, true)
}

// writeCalls answers a list of calls with their bodies. The bodies are
// written into the answer byte for byte (encoding/json would compact
// them), so "forwarded" is, in the answer's bytes, exactly the body the
// gateway sent upstream.
func (s *Server) writeCalls(w http.ResponseWriter, r *http.Request, tenantID string, calls []store.GatewayCall, next string, production bool) error {
	if s.blobs == nil && hasBodies(calls) {
		return errNoBodies
	}
	var body *gateway.BodyReader
	if s.blobs != nil {
		body = gateway.NewBodyReader(s.blobs, tenantID)
	}
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i, c := range calls {
		if i > 0 {
			b.WriteByte(',')
		}
		var bodies gateway.CallBodies
		if body != nil {
			var err error
			if bodies, err = body.Read(r.Context(), c.GatewayRecord); err != nil {
				return fmt.Errorf("call %s: %w", c.ID, err)
			}
		}
		if err := writeCallItem(&b, c, bodies, production); err != nil {
			return fmt.Errorf("call %s: %w", c.ID, err)
		}
	}
	b.WriteString(`],"next_cursor":`)
	if next == "" {
		b.WriteString("null")
	} else {
		writeJSONValue(&b, next)
	}
	b.WriteString("}\n")
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
	return nil
}

func hasBodies(calls []store.GatewayCall) bool {
	for _, c := range calls {
		if c.RequestBlob != nil || c.ResponseBlob != nil {
			return true
		}
	}
	return false
}

// callTimings are a call's times (SPEC §6.2): received, the upstream's
// first byte, done; null when the call never got that far.
type callTimings struct {
	ReceivedAt  time.Time  `json:"received_at"`
	FirstByteAt *time.Time `json:"first_byte_at"`
	DoneAt      *time.Time `json:"done_at"`
}

// writeCallItem writes one call of a list: a rollout's call with its seq,
// a production call with its agent_id.
//
//	{"seq"|"agent_id","call_id","protocol","status","request","forwarded","response","usage","counted","reason","timings"}
func writeCallItem(b *bytes.Buffer, c store.GatewayCall, bodies gateway.CallBodies, production bool) error {
	if bodies.Forwarded != nil && !json.Valid(bodies.Forwarded) {
		return errors.New("the rebuilt forwarded body is not JSON")
	}
	if production {
		b.WriteString(`{"agent_id":`)
		writeJSONValue(b, c.AgentID)
	} else {
		b.WriteString(`{"seq":`)
		b.WriteString(strconv.Itoa(c.Seq))
	}
	b.WriteString(`,"call_id":`)
	writeJSONValue(b, c.ID)
	b.WriteString(`,"protocol":`)
	writeJSONValue(b, callProtocol(c.Protocol))
	b.WriteString(`,"status":`)
	b.WriteString(strconv.Itoa(c.Status))
	b.WriteString(`,"request":`)
	b.Write(rawOrNull(bodies.Request))
	b.WriteString(`,"forwarded":`)
	b.Write(rawOrNull(bodies.Forwarded))
	b.WriteString(`,"response":`)
	b.Write(rawOrNull(bodies.Response))
	b.WriteString(`,"usage":`)
	b.Write(rawOrNull(c.Usage))
	b.WriteString(`,"counted":`)
	b.WriteString(strconv.FormatBool(c.Counted))
	b.WriteString(`,"reason":`)
	writeJSONValue(b, c.Reason)
	b.WriteString(`,"timings":`)
	writeJSONValue(b, callTimings{ReceivedAt: c.ReceivedAt, FirstByteAt: c.FirstByteAt, DoneAt: c.DoneAt})
	b.WriteByte('}')
	return nil
}

// writeJSONValue appends v's JSON encoding, without HTML escaping. v is
// one of gyre's own types, which always encode.
func writeJSONValue(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// rolloutTrajectory is GET /api/v1/rollouts/{id}/trajectory: the rollout
// as an ATIF document (the latest accepted version) built from its
// counted completions and the tool calls its output reported. It is
// checked by gyre's own validator before it is served.
func (s *Server) rolloutTrajectory(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	ro, err := s.store.GetRollout(r.Context(), p.TenantID, id)
	if err != nil {
		return err
	}
	doc, err := s.trajectoryOf(r.Context(), ro)
	if err != nil {
		return err
	}
	if err := atif.Validate(doc); err != nil {
		return fmt.Errorf("trajectory of rollout %s fails gyre's own validator: %w", ro.ID, err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(doc, '\n'))
	return nil
}

// trajectoryOf builds a rollout's ATIF document. A rollout with no
// counted completion, or one whose bodies were not captured, has none: 409.
func (s *Server) trajectoryOf(ctx context.Context, ro store.Rollout) ([]byte, error) {
	calls, err := s.store.GatewayCalls(ctx, ro.TenantID, ro.ID)
	if err != nil {
		return nil, err
	}
	var recs []atif.GatewayRecord
	var body *gateway.BodyReader
	for _, c := range calls {
		if !c.Counted {
			continue
		}
		if c.RequestBlob == nil || c.ResponseBlob == nil {
			return nil, gyre.Errorf(gyre.CodeConflict, "rollout %s has no trajectory: the bodies of its completion %d were not captured", ro.ID, c.Seq)
		}
		if s.blobs == nil {
			return nil, errNoBodies
		}
		if body == nil {
			body = gateway.NewBodyReader(s.blobs, ro.TenantID)
		}
		bodies, err := body.Read(ctx, c.GatewayRecord)
		if err != nil {
			return nil, fmt.Errorf("completion %d: %w", c.Seq, err)
		}
		// Trajectories are built from chat bodies: a Responses or Messages
		// call is converted where that is lossless, and a rollout with an
		// item chat cannot carry has none, never a wrong one.
		chat, err := gateway.ChatBodies(callProtocol(c.Protocol), bodies)
		if ne := (*gateway.NotExportableError)(nil); errors.As(err, &ne) {
			return nil, gyre.Errorf(gyre.CodeConflict, "rollout %s has no trajectory: its completion %d (%s protocol) holds an item with no chat form (%s)",
				ro.ID, c.Seq, callProtocol(c.Protocol), ne.Reason())
		}
		if err != nil {
			return nil, fmt.Errorf("completion %d: %w", c.Seq, err)
		}
		recs = append(recs, gateway.ATIFRecord(c, chat))
	}
	if len(recs) == 0 {
		return nil, gyre.Errorf(gyre.CodeConflict, "rollout %s has no trajectory yet: no counted completion is recorded", ro.ID)
	}
	var out *flywheel.RolloutOutput
	if ro.Output != nil {
		out = &flywheel.RolloutOutput{}
		if err := json.Unmarshal(ro.Output, out); err != nil {
			return nil, fmt.Errorf("stored output: %w", err)
		}
	}
	opts := atif.GatewayOptions{SessionID: ro.ID, TrajectoryID: ro.ID}
	if fingerprintName(out) == "" {
		opts.AgentName = ro.AgentID
	}
	tr, err := atif.FromGateway(recs, out, opts)
	if err != nil {
		return nil, fmt.Errorf("trajectory of rollout %s: %w", ro.ID, err)
	}
	return json.Marshal(tr)
}

// fingerprintName is the string "name" of the output's agent_fingerprint,
// which names the agent in a trajectory; "" when there is none.
func fingerprintName(out *flywheel.RolloutOutput) string {
	if out == nil || len(out.AgentFingerprint) == 0 {
		return ""
	}
	var fp struct {
		Name any `json:"name"`
	}
	_ = json.Unmarshal(out.AgentFingerprint, &fp) // a fingerprint of another shape names nothing
	name, _ := fp.Name.(string)
	return name
}

// getBlob is GET /api/v1/blobs/{sha256}: a blob the tenant references (an
// uploaded trajectory or workspace file, a fixture revision's content),
// streamed with the Content-Type it was stored with. A digest the tenant
// does not reference is 404 whoever else stored it; blobs are found
// through the tenant's own rows, and keyed by tenant, never by the
// digest alone.
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	sha := r.PathValue("sha256")
	if !blobstore.ValidSHA256(sha) {
		return errPathParam("sha256", "a lowercase hex SHA-256")
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	ref, err := s.store.TenantBlob(r.Context(), p.TenantID, sha)
	if errors.Is(err, store.ErrNotFound) {
		return gyre.Errorf(gyre.CodeNotFound, "no blob %s in this tenant", sha)
	}
	if err != nil {
		return err
	}
	if s.blobs == nil {
		return gyre.Errorf(gyre.CodeUnavailable, "this server has no blob store configured")
	}
	var key string
	switch ref.Kind {
	case store.BlobFixture:
		key, err = blobstore.FixtureKey(p.TenantID, sha)
	default:
		key, err = blobstore.KeyFor(eval.BlobPrefix(p.TenantID), sha)
	}
	if err != nil {
		return err
	}
	obj, err := s.blobs.Stat(r.Context(), key)
	if err != nil {
		return fmt.Errorf("blob %s referenced by the tenant: %w", sha, err)
	}
	rc, err := s.blobs.GetContent(r.Context(), key, sha)
	if err != nil {
		return fmt.Errorf("blob %s referenced by the tenant: %w", sha, err)
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", cmp.Or(obj.ContentType, blobstore.DefaultContentType))
	h.Set("Content-Length", strconv.FormatInt(obj.Size, 10))
	h.Set("ETag", `"`+sha+`"`)
	h.Set("Cache-Control", "private, no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := copyHoldingLast(w, rc); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "blob content cut short",
			slog.String("request_id", infoFrom(r.Context()).id),
			slog.String("sha256", sha),
			slog.Any("error", err))
		// Abort the connection: the client sees a truncated body, never
		// a complete one with wrong bytes.
		panic(http.ErrAbortHandler)
	}
	return nil
}
