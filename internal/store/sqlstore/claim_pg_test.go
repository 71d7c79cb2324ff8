package sqlstore_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

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
	base := storetest.PostgresURL(t)
	url := storetest.SearchPathURL(t, base, storetest.NewPostgresSchema(t, base))
	s, err := pgstore.Open(t.Context(), pgstore.Config{URL: url, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tenant, agent := storetest.SeedQueuedRollouts(t, s, 5000)

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	secret := [][]byte{make([]byte, 32)}
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+sqlstore.PGClaimSQL, tenant, agent, 2, nil, nil, int64(60e6), secret, secret, secret, 1)
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
	defer db.Close()
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
