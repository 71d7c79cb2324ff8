package build

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// A running build extends its job's lease at every renewal tick, so the
// queue never hands the job to another while it runs however long it
// takes; once the lease is lost (it lapsed and another claimed the job)
// the build is cancelled with store.ErrLeaseLost as the cause.
func TestHold_ExtendsTheLeaseAndCancelsTheBuildWhenItIsLost(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	st, err := storeopen.Open(t.Context(), storeopen.Options{DataDir: t.TempDir(), Clock: clk, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	if err := st.EnqueueJob(ctx, store.JobDatasetBuild, "d"); err != nil {
		t.Fatal(err)
	}
	j, err := st.ClaimJob(ctx, "cli", store.JobDatasetBuild, "d", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	var every time.Duration
	ext := renewSignal{Store: st, done: make(chan error)}
	b := New(ext, nil, nil)
	b.ticker = func(d time.Duration) (<-chan time.Time, func()) { every = d; return ticks, func() {} }
	hctx, lost := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.hold(hctx, lost, j, time.Minute) }()
	tick := func() {
		ticks <- clk.Now()
		if err := <-ext.done; err != nil {
			t.Fatalf("RenewJob: %v", err)
		}
	}
	for range 3 {
		clk.Advance(50 * time.Second)
		tick()
		if got, _ := st.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 1, time.Minute); len(got) != 0 {
			t.Fatalf("the queue handed out a running build whose lease was renewed: %+v", got)
		}
	}
	if every != 20*time.Second {
		t.Errorf("renewed every %s, want a third of the lease", every)
	}
	clk.Advance(2 * time.Minute) // a stalled process: the lease lapses
	if got, err := st.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 1, time.Minute); err != nil || len(got) != 1 {
		t.Fatalf("a lapsed lease was not taken over: %+v %v", got, err)
	}
	ticks <- clk.Now()
	if err := <-ext.done; !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("extending a lost lease: %v", err)
	}
	<-done
	if cause := context.Cause(hctx); !errors.Is(cause, store.ErrLeaseLost) {
		t.Fatalf("after the lease was lost the build's context ends with %v, want ErrLeaseLost", cause)
	}
}

// renewSignal reports each RenewJob's outcome on done once it is over.
type renewSignal struct {
	store.Store
	done chan error
}

func (e renewSignal) RenewJob(ctx context.Context, j store.Job, lease time.Duration) error {
	err := e.Store.RenewJob(ctx, j, lease)
	e.done <- err
	return err
}
