package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// pgClaimSQL leases queued rollouts for several claims of one agent in one
// statement, so claims cost one round trip and one plan between them: pick
// the agent's oldest queued rollouts (one more than all the claims ask
// for, to learn whether work remains) under FOR UPDATE SKIP LOCKED, number
// them in claim order, lease the first $9 with each row's own worker, lease
// grant and secrets ($3–$8 are arrays indexed by that number) at the
// database's clock, and return what a RolloutRequest needs. Concurrent
// statements on any replica skip each other's rows, and the UPDATE
// re-checks state = 'queued'.
//
// The LIMIT is written into the text (claimSQL), not bound: with a bound
// LIMIT PostgreSQL's generic plan guesses a tenth of the table and sorts
// it, so it re-plans every claim (half the claim's database time); with a
// literal one the cached generic plan walks the claimable index.
const pgClaimSQL = `WITH now AS (
	SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) AS us
), picked AS (
	SELECT r.id, r.batch_id, r.task_id, r.group_id, r.attempt, r.created_us, r.queue_seq, r.queue_pos
	FROM rollouts r
	WHERE r.tenant_id = $1 AND r.agent_id = $2 AND r.state = 'queued'
	ORDER BY r.queue_seq, r.batch_id, r.queue_pos
	LIMIT ` + claimLimitMark + ` FOR UPDATE SKIP LOCKED
), numbered AS (
	SELECT p.*, row_number() OVER (ORDER BY p.queue_seq, p.batch_id, p.queue_pos) AS n FROM picked p
), leased AS (
	UPDATE rollouts r SET state = 'leased',
		worker_id = NULLIF(($3::text[])[n.n], ''), worker_version = NULLIF(($4::text[])[n.n], ''),
		claimed_us = now.us, lease_granted_us = ($5::bigint[])[n.n], lease_expires_us = now.us + ($5::bigint[])[n.n],
		deadline_us = now.us + CAST(b.deadline_s * 1000000 AS BIGINT),
		lease_token_hash = ($6::bytea[])[n.n], gw_token_hash = ($7::bytea[])[n.n], gw_key_hash = ($8::bytea[])[n.n]
	FROM numbered n, now, batches b
	WHERE r.id = n.id AND n.n <= $9 AND b.id = r.batch_id AND r.state = 'queued'
	RETURNING r.id, r.deadline_us
)
SELECT n.n, n.id, n.batch_id, n.task_id, n.group_id, n.attempt, n.created_us, t.turn_input, l.deadline_us, now.us
FROM numbered n CROSS JOIN now JOIN tasks t ON t.id = n.task_id LEFT JOIN leased l ON l.id = n.id
ORDER BY n.n`

const claimLimitMark = "/*limit*/"

// maxCombinedRows bounds the rollouts one combined statement leases. A
// single claim may ask for up to 64 (SPEC §4.3), so it always fits.
const maxCombinedRows = 64

// claimSQL is pgClaimSQL picking up to limit rows. Limits are rounded up
// to 2^k+1, so a connection plans seven texts, not 65, before it settles
// on their cached generic plans; rows past the claims' total are only
// locked for the statement and tell that more work is queued.
var claimSQL = func() []string {
	out := make([]string, maxCombinedRows+2)
	for n := 1; n < len(out); n++ {
		limit := 2
		for limit < n {
			limit = 2*limit - 1
		}
		out[n] = strings.Replace(pgClaimSQL, claimLimitMark, strconv.Itoa(limit), 1)
	}
	return out
}()

// claimStatementTimeout bounds a combined claim statement, which runs
// detached from any one caller's context (several callers wait for it).
const claimStatementTimeout = 30 * time.Second

// claimCombiner lets claims of one agent that arrive while another claim
// of that agent is at the database ride together in the next statement
// (flat combining). Under load a claim then costs a fraction of a
// statement; a lone claim still runs at once. At most one statement per
// agent is in flight on a replica; other replicas, and claims with an
// Idempotency-Key, go their own way, kept apart by SKIP LOCKED.
type claimCombiner struct {
	mu    sync.Mutex
	lines map[string]*claimLine // by tenant and agent
	// statements counts the statements run, so tests can tell that
	// claims were combined.
	statements atomic.Int64
}

// claimLine is one agent's claims waiting for the next statement; its
// presence in lines means a runner goroutine serves it.
type claimLine struct {
	waiting []*pendingClaim
}

type pendingClaim struct {
	req  store.ClaimRequest
	ctx  context.Context
	done chan struct{}
	res  store.ClaimResult
	err  error
}

func newClaimCombiner() *claimCombiner {
	return &claimCombiner{lines: map[string]*claimLine{}}
}

// claimOneStatement is Claim without an Idempotency-Key on PostgreSQL: it
// joins the agent's line and waits for the statement that serves it.
func (s *Store) claimOneStatement(ctx context.Context, c store.ClaimRequest) (store.ClaimResult, error) {
	p := &pendingClaim{req: c, ctx: ctx, done: make(chan struct{})}
	key := c.TenantID + "\x00" + c.AgentID
	cc := s.claims
	cc.mu.Lock()
	line, running := cc.lines[key]
	if !running {
		line = &claimLine{}
		cc.lines[key] = line
	}
	line.waiting = append(line.waiting, p)
	cc.mu.Unlock()
	if !running {
		go s.runClaims(key, line)
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
	}
	// Gone before its statement started: leave the line, lease nothing.
	// Already taken: the statement is bounded, so wait for its outcome.
	cc.mu.Lock()
	for i, q := range line.waiting {
		if q == p {
			line.waiting = append(line.waiting[:i], line.waiting[i+1:]...)
			cc.mu.Unlock()
			return store.ClaimResult{}, fmt.Errorf("claim: %w", ctx.Err())
		}
	}
	cc.mu.Unlock()
	<-p.done
	return p.res, p.err
}

// runClaims serves an agent's line until it is empty, one statement per
// turn for every claim waiting when the turn starts (up to
// maxCombinedRows rollouts between them).
func (s *Store) runClaims(key string, line *claimLine) {
	cc := s.claims
	for {
		cc.mu.Lock()
		if len(line.waiting) == 0 {
			delete(cc.lines, key)
			cc.mu.Unlock()
			return
		}
		n, rows := 0, 0
		for n < len(line.waiting) && (n == 0 || rows+line.waiting[n].req.Max <= maxCombinedRows) {
			rows += line.waiting[n].req.Max
			n++
		}
		batch := make([]*pendingClaim, n)
		copy(batch, line.waiting)
		line.waiting = append(line.waiting[:0], line.waiting[n:]...)
		cc.mu.Unlock()

		s.claimTogether(batch)
		for _, p := range batch {
			close(p.done)
		}
	}
}

// claimTogether runs one statement for claims of one agent and hands each
// its share of the rollouts, in the order the claims arrived.
func (s *Store) claimTogether(batch []*pendingClaim) {
	total := 0
	for _, p := range batch {
		total += p.req.Max
	}
	var (
		workers, versions = make([]string, total), make([]string, total)
		grants            = make([]int64, total)
		leaseTok, gwTok   = make([][]byte, total), make([][]byte, total)
		gwKey             = make([][]byte, total)
		owner             = make([]int, total) // row number-1 → index in batch
		first             = batch[0].req
		i                 int
	)
	for b, p := range batch {
		for k := range p.req.Max {
			sec := p.req.Secrets[k]
			workers[i], versions[i], grants[i] = p.req.WorkerID, p.req.WorkerVersion, p.req.Lease.Microseconds()
			leaseTok[i], gwTok[i], gwKey[i] = sec.LeaseToken[:], sec.GatewayToken[:], sec.GatewayKey[:]
			owner[i] = b
			i++
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), claimStatementTimeout)
	defer cancel()
	fail := func(err error) {
		for _, p := range batch {
			p.res, p.err = store.ClaimResult{}, fmt.Errorf("claim: %w", err)
		}
	}
	s.claims.statements.Add(1)
	rows, err := s.writer.QueryContext(ctx, claimSQL[total+1], first.TenantID, first.AgentID,
		workers, versions, grants, leaseTok, gwTok, gwKey, total)
	if err != nil {
		fail(err)
		return
	}
	defer rows.Close()
	var (
		results = make([]store.ClaimResult, len(batch))
		now     int64
		more    bool
	)
	for rows.Next() {
		var (
			n        int
			r        = store.Rollout{TenantID: first.TenantID, AgentID: first.AgentID, State: gyre.StateLeased}
			created  int64
			deadline sql.NullInt64
		)
		if err := rows.Scan(&n, &r.ID, &r.BatchID, &r.TaskID, &r.GroupID, &r.Attempt, &created, &r.TurnInput, &deadline, &now); err != nil {
			fail(err)
			return
		}
		if n > total || !deadline.Valid {
			more = true // the extra row: picked, not leased
			continue
		}
		b := owner[n-1]
		req := batch[b].req
		r.CreatedAt = store.FromMicros(created)
		r.LeaseGrant = req.Lease
		claimed, expires, dl := store.FromMicros(now), store.FromMicros(now+grants[n-1]), store.FromMicros(deadline.Int64)
		r.ClaimedAt, r.LeaseExpiresAt, r.Deadline = &claimed, &expires, &dl
		if req.WorkerID != "" {
			r.WorkerID = &req.WorkerID
		}
		if req.WorkerVersion != "" {
			r.WorkerVersion = &req.WorkerVersion
		}
		res := &results[b]
		res.Rollouts = append(res.Rollouts, store.Claimed{Rollout: r, Secrets: len(res.Rollouts)})
	}
	if err := rows.Err(); err != nil {
		fail(err)
		return
	}
	at := s.clock.Now()
	if now != 0 {
		at = store.FromMicros(now)
	}
	for b, p := range batch {
		p.res = results[b]
		p.res.Now, p.res.MoreQueued = at, more
	}
}
