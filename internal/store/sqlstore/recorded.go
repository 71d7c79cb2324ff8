package sqlstore

import (
	"context"
	"database/sql"
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
	cur := listCursor(tenantID, "rollout-calls", rolloutID)
	after, err := decodeSeq(cur, p.Cursor)
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
		next = cur.encode(strconv.Itoa(out[n-1].Seq))
	}
	return out, next, nil
}

// decodeSeq reads a cursor positioned by a sequence number: the last
// one of the previous page.
func decodeSeq(cur cursorScope, c string) (int, error) {
	pos, err := cur.decode(c)
	if err != nil || pos == "" {
		return 0, err
	}
	seq, err := strconv.Atoi(pos)
	if err != nil || seq < 1 || strconv.Itoa(seq) != pos {
		return 0, fmt.Errorf("cursor holds no sequence number: %w", store.ErrInvalidCursor)
	}
	return seq, nil
}

// ProductionCalls lists the tenant's production calls matching f in order
// of receipt, served by the indexes of migration 00010. As with turns, a
// record made durable late (records are flushed in batches, and
// PostgreSQL transactions commit in any order) may appear before calls
// already listed: a client polling with Since should overlap its windows.
func (s *Store) ProductionCalls(ctx context.Context, tenantID string, f store.CallFilter, p store.Page) ([]store.GatewayCall, string, error) {
	since := int64(0)
	if !f.Since.IsZero() {
		since = ceilMicros(f.Since)
	}
	cur := listCursor(tenantID, "calls", f.AgentID, strconv.FormatInt(since, 10))
	after, err := decodeProductionCursor(cur, p.Cursor)
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
		b.WriteString(` AND received_us >= ` + arg(since))
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
		next = cur.encode(productionPos{receivedUS: store.Micros(last.ReceivedAt), arrival: int64(last.Arrival), id: last.ID}.String())
	}
	return out, next, nil
}

// productionPos is the position after the last call of a page: its
// receipt time, arrival count and id.
type productionPos struct {
	receivedUS int64
	arrival    int64
	id         string
}

func (p productionPos) String() string {
	return fmt.Sprintf("%d:%d:%s", p.receivedUS, p.arrival, p.id)
}

func decodeProductionCursor(cur cursorScope, c string) (*productionPos, error) {
	raw, err := cur.decode(c)
	if err != nil || raw == "" {
		return nil, err
	}
	bad := fmt.Errorf("cursor holds no position in the calls: %w", store.ErrInvalidCursor)
	parts := strings.Split(raw, ":")
	if len(parts) != 3 {
		return nil, bad
	}
	out := &productionPos{id: parts[2]}
	if out.receivedUS, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
		return nil, bad
	}
	if out.arrival, err = strconv.ParseInt(parts[1], 10, 64); err != nil || out.arrival < 0 {
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
