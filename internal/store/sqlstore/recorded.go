package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// RolloutCalls returns one page of the rollout's calls in order of arrival
// (the order GatewayCalls numbers), the page after the cursor's sequence
// number. Sequence numbers are positions in that order, so a page is an
// offset into it.
func (s *Store) RolloutCalls(ctx context.Context, tenantID, rolloutID string, p store.Page) ([]store.GatewayCall, string, error) {
	after, err := decodeRolloutCallsCursor(rolloutID, p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("rollout calls: %w", err)
	}
	var one int
	if err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM rollouts WHERE tenant_id = $1 AND id = $2`,
		tenantID, rolloutID).Scan(&one); err != nil {
		return nil, "", notFound("rollout calls", err)
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+gatewayCallCols+` FROM gateway_calls
		WHERE tenant_id = $1 AND rollout_id = $2 ORDER BY received_us, arrival, seq LIMIT $3 OFFSET $4`,
		tenantID, rolloutID, n+1, after)
	if err != nil {
		return nil, "", fmt.Errorf("rollout calls: %w", err)
	}
	defer rows.Close()
	var out []store.GatewayCall
	for rows.Next() {
		c, err := scanGatewayCall(rows)
		if err != nil {
			return nil, "", fmt.Errorf("rollout calls: %w", err)
		}
		c.Seq = after + len(out) + 1
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("rollout calls: %w", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = rolloutCallsCursor(rolloutID, out[n-1].Seq)
	}
	return out, next, nil
}

// rolloutCallsCursor is base64url of "rcalls:<rollout id>:<last seq>": a
// cursor of one rollout's calls is refused for another's.
func rolloutCallsCursor(rolloutID string, seq int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("rcalls:" + rolloutID + ":" + strconv.Itoa(seq)))
}

func decodeRolloutCallsCursor(rolloutID, c string) (int, error) {
	if c == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, fmt.Errorf("decode cursor: %w", store.ErrInvalidCursor)
	}
	rest, ok := strings.CutPrefix(string(raw), "rcalls:"+rolloutID+":")
	seq, err := strconv.Atoi(rest)
	if !ok || err != nil || seq < 1 || strconv.Itoa(seq) != rest {
		return 0, fmt.Errorf("cursor is not a cursor of this rollout's calls: %w", store.ErrInvalidCursor)
	}
	return seq, nil
}

// ProductionCalls lists the tenant's production calls matching f in order
// of receipt, served by the indexes of migration 00010. As with turns, a
// record made durable late (records are flushed in batches, and
// PostgreSQL transactions commit in any order) may appear before calls
// already listed: a client polling with Since should overlap its windows.
func (s *Store) ProductionCalls(ctx context.Context, tenantID string, f store.CallFilter, p store.Page) ([]store.GatewayCall, string, error) {
	tag := callFilterTag(tenantID, f)
	after, err := decodeProductionCursor(tag, p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("production calls: %w", err)
	}
	n := limit(p)
	var b strings.Builder
	args := []any{tenantID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`SELECT ` + gatewayCallCols + ` FROM gateway_calls WHERE tenant_id = $1 AND rollout_id IS NULL`)
	if f.AgentID != "" {
		b.WriteString(` AND agent_id = ` + arg(f.AgentID))
	}
	if !f.Since.IsZero() {
		b.WriteString(` AND received_us >= ` + arg(ceilMicros(f.Since)))
	}
	if after != nil {
		r, a, id := arg(after.receivedUS), arg(after.arrival), arg(after.id)
		b.WriteString(` AND (received_us > ` + r + ` OR (received_us = ` + r + ` AND (arrival > ` + a +
			` OR (arrival = ` + a + ` AND id > ` + id + `))))`)
	}
	b.WriteString(` ORDER BY received_us, arrival, id LIMIT ` + arg(n+1))
	rows, err := s.reader.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, "", fmt.Errorf("production calls: %w", err)
	}
	defer rows.Close()
	var out []store.GatewayCall
	for rows.Next() {
		c, err := scanGatewayCall(rows)
		if err != nil {
			return nil, "", fmt.Errorf("production calls: %w", err)
		}
		c.Seq = 0
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("production calls: %w", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		last := out[n-1]
		next = productionCursor{tag: tag, receivedUS: store.Micros(last.ReceivedAt), arrival: int64(last.Arrival), id: last.ID}.encode()
	}
	return out, next, nil
}

// callFilterTag binds a production-calls cursor to its tenant and filter:
// a cursor sent with another tenant's key, agent_id or since is refused.
func callFilterTag(tenantID string, f store.CallFilter) string {
	since := int64(0)
	if !f.Since.IsZero() {
		since = ceilMicros(f.Since)
	}
	sum := sha256.Sum256([]byte(tenantID + "\x00" + f.AgentID + "\x00" + strconv.FormatInt(since, 10)))
	return hex.EncodeToString(sum[:8])
}

// productionCursor is the position after the last call of a page.
type productionCursor struct {
	tag        string
	receivedUS int64
	arrival    int64
	id         string
}

func (c productionCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("pcalls:%s:%d:%d:%s", c.tag, c.receivedUS, c.arrival, c.id)))
}

func decodeProductionCursor(tag, c string) (*productionCursor, error) {
	if c == "" {
		return nil, nil
	}
	bad := fmt.Errorf("cursor is not a cursor of this list of calls: %w", store.ErrInvalidCursor)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 5 || parts[0] != "pcalls" || parts[1] != tag {
		return nil, bad
	}
	out := &productionCursor{tag: tag, id: parts[4]}
	if out.receivedUS, err = strconv.ParseInt(parts[2], 10, 64); err != nil {
		return nil, bad
	}
	if out.arrival, err = strconv.ParseInt(parts[3], 10, 64); err != nil || out.arrival < 0 {
		return nil, bad
	}
	if u, err := uuid.Parse(out.id); err != nil || u.String() != out.id {
		return nil, bad
	}
	return out, nil
}

// TenantBlob finds a blob the tenant references: one it uploaded (or a run
// record listed), else a fixture revision's content.
func (s *Store) TenantBlob(ctx context.Context, tenantID, sum string) (store.TenantBlob, error) {
	out := store.TenantBlob{SHA256: sum, Kind: store.BlobUploaded}
	err := s.reader.QueryRowContext(ctx, `SELECT size_bytes FROM blob_refs WHERE tenant_id = $1 AND sha256 = $2`,
		tenantID, sum).Scan(&out.Size)
	if err == nil {
		return out, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.TenantBlob{}, fmt.Errorf("tenant blob: %w", err)
	}
	out.Kind = store.BlobFixture
	err = s.reader.QueryRowContext(ctx, `SELECT size_bytes FROM fixtures WHERE tenant_id = $1 AND sha256 = $2 LIMIT 1`,
		tenantID, sum).Scan(&out.Size)
	if err != nil {
		return store.TenantBlob{}, notFound("tenant blob", err)
	}
	return out, nil
}
