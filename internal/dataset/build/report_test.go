package build

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// A running build records its progress on the dataset: 0 when it starts
// (a rebuild starts again), then the counts so far at every tick, until
// it stops.
func TestReport_RecordsTheBuildsProgressAtEveryTick(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	data := t.TempDir()
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", data)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	tn, err := st.CreateTenant(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Rollouts(ctx, st, blobs, tn.ID, 2); err != nil {
		t.Fatal(err)
	}
	d, err := st.CreateDataset(ctx, store.NewDataset{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tn.ID,
		AgentID: seed.Agent, Format: "rl", Filters: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetDatasetProgress(ctx, d.ID, store.DatasetProgress{Rollouts: 9, Rows: 9}); err != nil {
		t.Fatal(err) // an earlier build's
	}
	progress := func() store.DatasetProgress {
		t.Helper()
		got, err := st.DatasetByID(ctx, d.ID)
		if err != nil || got.Progress == nil {
			t.Fatalf("progress: %+v %v", got.Progress, err)
		}
		return *got.Progress
	}
	ticks := make(chan time.Time)
	stopped := false
	b := New(st, blobs, nil)
	b.ticker = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() { stopped = true } }
	var p Progress
	stop, err := b.report(ctx, d.ID, &p)
	if err != nil {
		t.Fatal(err)
	}
	if got := progress(); got != (store.DatasetProgress{}) {
		t.Fatalf("a build that starts records %+v, want 0", got)
	}
	p.rollouts.Add(2)
	p.rows.Add(3)
	ticks <- time.Now()
	ticks <- time.Now() // taken once the first tick's report is written
	if got := progress(); got != (store.DatasetProgress{Rollouts: 2, Rows: 3}) {
		t.Fatalf("after a tick: %+v, want 2 rollouts and 3 rows", got)
	}
	stop()
	if !stopped {
		t.Error("stop left the ticker running")
	}
}
