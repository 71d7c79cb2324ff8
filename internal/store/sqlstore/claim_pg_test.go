package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/pgstore"
	"github.com/gyrehq/gyre/internal/store/sqlstore"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// TestPostgresClaimPlan_UsesTheClaimableIndexOnAFreshTable: right after a
// batch queues rollouts into a table PostgreSQL has no statistics for,
// the claim still walks the partial claimable index in queue order, and
// does not sort every rollout the agent ever had (it did, 20× slower at
// 5,000 rollouts, until autovacuum analyzed the table).
func TestPostgresClaimPlan_UsesTheClaimableIndexOnAFreshTable(t *testing.T) {
	t.Parallel()
	s, db := openPostgresStore(t)
	tenant, agent := storetest.SeedQueuedRollouts(t, s, 5000)
	secret := [][]byte{make([]byte, 32)}
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+sqlstore.PGClaimSQL(2), tenant, agent, []string{""}, []string{""}, []int64{60e6}, secret, secret, secret, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Scan using rollouts_claimable on rollouts r") {
		t.Fatalf("the claim does not pick from the claimable index:\n%s", text)
	}
}

// TestPostgresCreateBatch_NeverWaitsLongToAnalyze: the statistics refresh
// after a large batch gives up when another session holds the table's
// ShareUpdateExclusive lock (a vacuum, another ANALYZE), instead of
// holding the batch's answer until that session ends.
func TestPostgresCreateBatch_NeverWaitsLongToAnalyze(t *testing.T) {
	t.Parallel()
	s, db := openPostgresStore(t)
	holder, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(t.Context(), `LOCK TABLE rollouts IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// Should the batch wait for the lock (without its lock and statement
	// timeouts it waits for as long as the holder), fail and let it go.
	stop := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-time.After(20 * time.Second):
			t.Error("CreateBatch is still waiting for the lock another session holds on rollouts")
			_ = holder.Rollback()
		}
	}()
	storetest.SeedQueuedRollouts(t, s, 300)
	close(stop)
}

// openPostgresStore opens a migrated store in a schema of its own, and a
// plain connection pool on the same schema.
func openPostgresStore(t *testing.T) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	base := storetest.PostgresURL(t)
	url := storetest.SearchPathURL(t, base, storetest.NewPostgresSchema(t, base))
	s, err := pgstore.Open(t.Context(), pgstore.Config{URL: url, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

func freshSecrets(t *testing.T, n int) []store.RolloutSecrets {
	t.Helper()
	out := make([]store.RolloutSecrets, n)
	for i := range out {
		for _, b := range [][]byte{out[i].LeaseToken[:], out[i].GatewayToken[:], out[i].GatewayKey[:]} {
			if _, err := rand.Read(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestPostgresClaim_CombinedClaimsKeepTheirOwnWorkerLeaseAndSecrets:
// claims of one agent that share a statement each lease their own
// rollouts with their own worker, lease grant and secrets, and together
// take every queued rollout exactly once.
func TestPostgresClaim_CombinedClaimsKeepTheirOwnWorkerLeaseAndSecrets(t *testing.T) {
	t.Parallel()
	s, _ := openPostgresStore(t)
	const queued = 600
	tenant, agent := storetest.SeedQueuedRollouts(t, s, queued)
	type claimant struct {
		req store.ClaimRequest
		got []store.Claimed
	}
	var (
		mu       sync.Mutex
		claims   []claimant
		start    = make(chan struct{})
		wg       sync.WaitGroup
		finished atomic.Bool
	)
	for w := range 24 {
		wg.Go(func() {
			<-start
			for i := 0; !finished.Load(); i++ {
				max := 1 + (w+i)%5
				req := store.ClaimRequest{
					TenantID: tenant, AgentID: agent, Max: max,
					Lease:    time.Duration(60+w) * time.Second,
					WorkerID: fmt.Sprintf("w%d", w), Secrets: freshSecrets(t, max),
				}
				if w%3 == 0 {
					req.WorkerID, req.WorkerVersion = "", fmt.Sprintf("v%d", w)
				}
				res, err := s.Claim(t.Context(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if len(res.Rollouts) > max {
					t.Errorf("claim for %d got %d rollouts", max, len(res.Rollouts))
				}
				if len(res.Rollouts) == 0 {
					finished.Store(true)
				}
				mu.Lock()
				claims = append(claims, claimant{req: req, got: res.Rollouts})
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	seen := map[string]bool{}
	for _, c := range claims {
		for i, got := range c.got {
			if seen[got.Rollout.ID] {
				t.Fatalf("rollout %s claimed twice", got.Rollout.ID)
			}
			seen[got.Rollout.ID] = true
			if got.Secrets != i {
				t.Fatalf("claim's rollout %d uses secret set %d", i, got.Secrets)
			}
			sec := c.req.Secrets[got.Secrets]
			r, err := s.GetRollout(t.Context(), tenant, got.Rollout.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.req.WorkerID; (want == "") != (r.WorkerID == nil) || (r.WorkerID != nil && *r.WorkerID != want) {
				t.Fatalf("rollout %s stored worker %v, claimed by %q", r.ID, r.WorkerID, want)
			}
			if want := c.req.WorkerVersion; (want == "") != (r.WorkerVersion == nil) || (r.WorkerVersion != nil && *r.WorkerVersion != want) {
				t.Fatalf("rollout %s stored worker version %v, claimed with %q", r.ID, r.WorkerVersion, want)
			}
			if r.LeaseGrant != c.req.Lease || r.LeaseExpiresAt.Sub(*r.ClaimedAt) != c.req.Lease {
				t.Fatalf("rollout %s: lease grant %v, expiry-claim %v; claimed for %v", r.ID, r.LeaseGrant, r.LeaseExpiresAt.Sub(*r.ClaimedAt), c.req.Lease)
			}
			if !got.Rollout.LeaseExpiresAt.Equal(*r.LeaseExpiresAt) {
				t.Fatalf("rollout %s: answered expiry %v, stored %v", r.ID, got.Rollout.LeaseExpiresAt, r.LeaseExpiresAt)
			}
			if err := s.CheckLease(t.Context(), tenant, r.ID, sec.LeaseToken); err != nil {
				t.Fatalf("rollout %s does not take its claim's lease token: %v", r.ID, err)
			}
			grant, err := s.GatewayGrant(t.Context(), sec.GatewayToken)
			if err != nil || grant.RolloutID != r.ID || grant.KeyHash != sec.GatewayKey {
				t.Fatalf("rollout %s: its claim's gateway token resolves to %+v, %v", r.ID, grant, err)
			}
		}
	}
	if len(seen) != queued {
		t.Fatalf("claimed %d distinct rollouts, want %d", len(seen), queued)
	}
	if n := sqlstore.ClaimStatements(s); n >= int64(len(claims)) {
		t.Errorf("%d claims took %d statements: concurrent claims were never combined", len(claims), n)
	}
}

// TestPostgresClaim_CancelledWhileWaitingLeasesNothing: a claim whose
// caller gives up while it waits behind another claim's statement leaves
// the line and leases nothing; the claim in flight completes.
func TestPostgresClaim_CancelledWhileWaitingLeasesNothing(t *testing.T) {
	t.Parallel()
	s, db := openPostgresStore(t)
	tenant, agent := storetest.SeedQueuedRollouts(t, s, 10)
	holder, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	// The first claim's statement waits for this lock.
	if _, err := holder.ExecContext(t.Context(), `LOCK TABLE rollouts IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := make(chan store.ClaimResult, 1)
	go func() {
		res, err := s.Claim(t.Context(), store.ClaimRequest{TenantID: tenant, AgentID: agent, Max: 2, Lease: time.Minute, Secrets: freshSecrets(t, 2)})
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiting int
		if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH now AS%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first claim never reached the database")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, store.ClaimRequest{TenantID: tenant, AgentID: agent, Max: 3, Lease: time.Minute, Secrets: freshSecrets(t, 3)})
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it queue behind the first
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiting claim: err = %v, want context.Canceled", err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res := <-first; len(res.Rollouts) != 2 || !res.MoreQueued {
		t.Fatalf("first claim leased %d rollouts (more queued %v), want 2 and more", len(res.Rollouts), res.MoreQueued)
	}
	var leased int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM rollouts WHERE state = 'leased'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 2 {
		t.Fatalf("%d rollouts leased, want the first claim's 2", leased)
	}
}

// TestPostgresClaim_LargeClaimTakesTheTransactionalPath: a claim for more rollouts
// than one combined statement leases (the store's callers may ask for
// more than the contract's 64) still leases them, on the transactional
// path.
func TestPostgresClaim_LargeClaimTakesTheTransactionalPath(t *testing.T) {
	t.Parallel()
	s, _ := openPostgresStore(t)
	tenant, agent := storetest.SeedQueuedRollouts(t, s, 80)
	res, err := s.Claim(t.Context(), store.ClaimRequest{TenantID: tenant, AgentID: agent, Max: 70, Lease: time.Minute, Secrets: freshSecrets(t, 70)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rollouts) != 70 || !res.MoreQueued {
		t.Fatalf("leased %d rollouts (more queued %v), want 70 and more", len(res.Rollouts), res.MoreQueued)
	}
}
