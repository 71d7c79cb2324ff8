package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// fakeStore is a hand-written store fake: the methods the recorder uses
// are function fields; any other call panics (through the nil Store).
type fakeStore struct {
	Store
	mu      sync.Mutex
	now     time.Time
	flushes []store.GatewayFlush
	fail    error
	live    map[string]bool
	// afterRecord, when set, runs after RecordGateway has stored a
	// flush and before it returns (a commit whose caller has not yet
	// heard of it).
	afterRecord func()
}

func (f *fakeStore) LeaseClock(context.Context) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now, nil
}

func (f *fakeStore) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *fakeStore) RecordGateway(_ context.Context, fl store.GatewayFlush) error {
	f.mu.Lock()
	if f.fail != nil {
		f.mu.Unlock()
		return f.fail
	}
	f.flushes = append(f.flushes, fl)
	after := f.afterRecord
	f.mu.Unlock()
	if after != nil {
		after()
	}
	return nil
}

// usage is what GatewayUsage would answer for rolloutID: its stored
// records, a record written again (a provisional one replaced) once.
func (f *fakeStore) usage(rolloutID string) store.GatewayUsage {
	f.mu.Lock()
	defer f.mu.Unlock()
	recs := map[string]store.GatewayRecord{}
	for _, fl := range f.flushes {
		for _, rec := range fl.Records {
			if rec.RolloutID != nil && *rec.RolloutID == rolloutID {
				recs[rec.ID] = rec
			}
		}
	}
	var u store.GatewayUsage
	for _, rec := range recs {
		u.Calls++
		if rec.Counted {
			u.Completions++
		}
	}
	return u
}

func (f *fakeStore) GatewayLive(_ context.Context, ids []string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = f.live[id]
	}
	return out, nil
}

func (f *fakeStore) lastBeat(t *testing.T) time.Time {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.flushes) == 0 || f.flushes[len(f.flushes)-1].Beat == nil {
		t.Fatal("no beat")
	}
	return f.flushes[len(f.flushes)-1].Beat.FlushedThrough
}

func newTestRecorder(st *fakeStore, blobs BlobStore) *Recorder {
	cfg := Config{}.WithDefaults()
	return newRecorder(st, blobs, clock.Real{}, slog.New(slog.DiscardHandler), cfg)
}

func rolloutRecord(id string, counted bool) *pendingRecord {
	return &pendingRecord{rec: store.GatewayRecord{ID: "call-" + id, TenantID: "t", AgentID: "a", RolloutID: &id, Counted: counted}}
}

// TestRecorder_WatermarkWaitsForRequestsInFlight: the watermark never
// passes the earliest credential read a request in flight could have made,
// and advances once it is recorded.
func TestRecorder_WatermarkWaitsForRequestsInFlight(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &fakeStore{now: t0}
	r := newTestRecorder(st, nil)
	ctx := context.Background()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w := st.lastBeat(t); !w.Equal(t0) {
		t.Fatalf("idle watermark %v, want the lease clock %v", w, t0)
	}
	st.advance(time.Second)
	f := r.begin(func(error) {}) // registered after the flush at t0: reads at ≥ t0
	r.attach(f, "r1")
	for range 3 {
		st.advance(time.Second)
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if w := st.lastBeat(t); !w.Equal(t0) {
			t.Fatalf("watermark %v passed a request in flight (registered at %v)", w, t0)
		}
	}
	r.finish(f, rolloutRecord("r1", true))
	// Waiting records hold the watermark too, until a flush writes them.
	st.advance(time.Second)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	last := st.flushes[len(st.flushes)-1]
	st.mu.Unlock()
	if len(last.Records) != 1 || !last.Beat.FlushedThrough.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("flush wrote %d records with watermark %v", len(last.Records), last.Beat.FlushedThrough)
	}
	if r.Pending() != 0 {
		t.Errorf("%d records still pending", r.Pending())
	}
}

func TestRecorder_FailedFlushKeepsRecordsAndWatermark(t *testing.T) {
	t.Parallel()
	st := &fakeStore{now: time.Unix(100, 0)}
	r := newTestRecorder(st, nil)
	ctx := context.Background()
	f := r.begin(func(error) {})
	r.finish(f, rolloutRecord("r1", true))
	st.fail = errors.New("database down")
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush succeeded")
	}
	if r.Pending() != 1 || len(st.flushes) != 0 {
		t.Fatalf("pending %d, flushes %d", r.Pending(), len(st.flushes))
	}
	st.fail = nil
	if err := r.Flush(ctx); err != nil || r.Pending() != 0 || len(st.flushes[0].Records) != 1 {
		t.Fatalf("retry: %v, pending %d", err, r.Pending())
	}
}

// TestRecorder_RevocationCutsRequestsInFlight: the watcher cancels the
// requests of rollouts that no longer admit requests, with errRevoked.
func TestRecorder_RevocationCutsRequestsInFlight(t *testing.T) {
	t.Parallel()
	st := &fakeStore{now: time.Unix(100, 0), live: map[string]bool{"alive": true}}
	r := newTestRecorder(st, nil)
	var cut []string
	var mu sync.Mutex
	flight := func(id string) *flight {
		f := r.begin(func(cause error) {
			if errors.Is(cause, errRevoked) {
				mu.Lock()
				cut = append(cut, id)
				mu.Unlock()
			}
		})
		r.attach(f, id)
		return f
	}
	flight("alive")
	flight("revoked")
	r.begin(func(error) { t.Error("a request without a rollout was cut") }) // authenticating
	r.watchOnce(context.Background())
	if len(cut) != 1 || cut[0] != "revoked" {
		t.Fatalf("cut %v", cut)
	}
}

// failingBlobs fails every write.
type failingBlobs struct{}

func (failingBlobs) Exists(context.Context, string) (bool, error) { return false, nil }
func (failingBlobs) PutContent(context.Context, string, io.Reader) (string, int64, error) {
	return "", 0, errors.New("bucket unavailable")
}

// TestRecorder_BodiesThatCannotBeStored: a record waits a few flushes for
// its bodies, then is written without them rather than never.
func TestRecorder_BodiesThatCannotBeStored(t *testing.T) {
	t.Parallel()
	st := &fakeStore{now: time.Unix(100, 0)}
	r := newTestRecorder(st, failingBlobs{})
	p := rolloutRecord("r1", true)
	p.response = []byte(`{}`)
	r.finish(r.begin(func(error) {}), p)
	for i := 1; i < maxBlobAttempts; i++ {
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.Pending() != 1 {
			t.Fatalf("flush %d wrote the record without its bodies", i)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	last := st.flushes[len(st.flushes)-1]
	if r.Pending() != 0 || len(last.Records) != 1 || last.Records[0].ResponseBlob != nil {
		t.Fatalf("pending %d, last flush %+v", r.Pending(), last.Records)
	}
}

// accessStore is a fakeStore that answers credential reads and counts
// them; during runs inside each read (to race a revocation with it).
type accessStore struct {
	*fakeStore
	access store.GatewayAccess
	reads  int
	during func()
}

func (s *accessStore) GatewayAccess(context.Context, [32]byte) (store.GatewayAccess, error) {
	s.mu.Lock()
	s.reads++
	a, during := s.access, s.during
	s.during = nil
	s.mu.Unlock()
	if during != nil {
		during()
	}
	return a, nil
}

func (s *accessStore) setAccess(f func(a *store.GatewayAccess)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.access)
}

// testAccess is a usable credential of rollout r1 read at now.
func testAccess(now, lease time.Time) store.GatewayAccess {
	return store.GatewayAccess{GatewayGrant: store.GatewayGrant{RolloutID: "r1", State: gyre.StateLeased, Deadline: now.Add(time.Hour)},
		Now: now, LeaseExpires: &lease}
}

// TestRecorder_CredentialCache: one read admits further requests of the
// rollout for GrantCacheTTL, except that anything that ends the
// credential is seen without waiting for the TTL: a revocation through
// this process (Forget, ForgetAll), one elsewhere (the revocation check),
// a lease or deadline reached since the read; a read that overlapped a
// Forget is not kept; rollouts with limits are read every time.
func TestRecorder_CredentialCache(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// between runs after the first read; wantReads is the reads after
		// the second access.
		between    func(t *testing.T, r *Recorder, st *accessStore, clk *clock.Fake)
		wantReads  int
		wantUsable bool
	}{
		{"cached", func(*testing.T, *Recorder, *accessStore, *clock.Fake) {}, 1, true},
		{"forgotten", func(_ *testing.T, r *Recorder, st *accessStore, _ *clock.Fake) {
			st.setAccess(func(a *store.GatewayAccess) { a.Revoked = true })
			r.Forget("r1")
		}, 2, false},
		{"another rollout forgotten", func(_ *testing.T, r *Recorder, _ *accessStore, _ *clock.Fake) { r.Forget("r2") }, 1, true},
		{"all forgotten", func(_ *testing.T, r *Recorder, _ *accessStore, _ *clock.Fake) { r.ForgetAll() }, 2, true},
		{"revoked elsewhere", func(t *testing.T, r *Recorder, st *accessStore, _ *clock.Fake) {
			st.setAccess(func(a *store.GatewayAccess) { a.Revoked = true })
			r.watchOnce(t.Context()) // st.live["r1"] is false
		}, 2, false},
		{"still live elsewhere", func(t *testing.T, r *Recorder, st *accessStore, _ *clock.Fake) {
			st.mu.Lock()
			st.live["r1"] = true
			st.mu.Unlock()
			r.watchOnce(t.Context())
		}, 1, true},
		{"lease expired since", func(_ *testing.T, _ *Recorder, st *accessStore, clk *clock.Fake) {
			clk.Advance(2 * time.Minute)
			st.setAccess(func(a *store.GatewayAccess) { a.Now = clk.Now() })
		}, 2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_900_000_000, 0))
			lease := clk.Now().Add(time.Minute)
			st := &accessStore{fakeStore: &fakeStore{now: clk.Now(), live: map[string]bool{}}, access: testAccess(clk.Now(), lease)}
			cfg := Config{GrantCacheTTL: time.Hour}.WithDefaults()
			r := newRecorder(st, nil, clk, slog.New(slog.DiscardHandler), cfg)
			if a, err := r.access(t.Context(), [32]byte{1}); err != nil || !a.Usable() {
				t.Fatalf("first read: %+v %v", a, err)
			}
			tc.between(t, r, st, clk)
			a, err := r.access(t.Context(), [32]byte{1})
			if err != nil || a.Usable() != tc.wantUsable || st.reads != tc.wantReads {
				t.Errorf("second access: usable %v after %d reads, want %v after %d", a.Usable(), st.reads, tc.wantUsable, tc.wantReads)
			}
		})
	}
	t.Run("read overlapping a revocation is not kept", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Unix(1_900_000_000, 0))
		lease := clk.Now().Add(time.Minute)
		st := &accessStore{fakeStore: &fakeStore{now: clk.Now()}, access: testAccess(clk.Now(), lease)}
		r := newRecorder(st, nil, clk, slog.New(slog.DiscardHandler), Config{GrantCacheTTL: time.Hour}.WithDefaults())
		st.during = func() { r.Forget("r1") }
		for range 2 {
			if _, err := r.access(t.Context(), [32]byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		if st.reads != 2 {
			t.Errorf("%d reads: a read that overlapped a revocation was cached", st.reads)
		}
	})
	t.Run("limits are read every time", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Unix(1_900_000_000, 0))
		lease := clk.Now().Add(time.Minute)
		st := &accessStore{fakeStore: &fakeStore{now: clk.Now()}, access: testAccess(clk.Now(), lease)}
		st.access.Limits = []byte(`{"max_llm_calls":3}`)
		r := newRecorder(st, nil, clk, slog.New(slog.DiscardHandler), Config{GrantCacheTTL: time.Hour}.WithDefaults())
		for range 2 {
			if _, err := r.access(t.Context(), [32]byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		if st.reads != 2 {
			t.Errorf("%d reads for a rollout with limits, want 2", st.reads)
		}
	})
}

// TestRecorder_WatermarkWaitsForCachedCredentials: a cached credential can
// admit a request as if read when it was, so the watermark stays at that
// read until the credential is dropped (or lapses).
func TestRecorder_WatermarkWaitsForCachedCredentials(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	t0 := clk.Now()
	st := &accessStore{fakeStore: &fakeStore{now: t0}, access: testAccess(t0, t0.Add(time.Hour))}
	r := newRecorder(st, nil, clk, slog.New(slog.DiscardHandler), Config{GrantCacheTTL: time.Hour}.WithDefaults())
	ctx := t.Context()
	if _, err := r.access(ctx, [32]byte{1}); err != nil {
		t.Fatal(err)
	}
	st.advance(time.Second)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w := st.lastBeat(t); !w.Equal(t0) {
		t.Fatalf("watermark %v passed a cached credential read at %v", w, t0)
	}
	r.Forget("r1")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w := st.lastBeat(t); !w.Equal(t0.Add(time.Second)) {
		t.Fatalf("watermark %v after the credential was dropped, want the lease clock %v", w, t0.Add(time.Second))
	}
}

// holdNextWrite makes st's next RecordGateway stop once it has stored
// its flush: stored is closed then, and release lets it return (later
// writes are not held).
func holdNextWrite(st *fakeStore) (stored <-chan struct{}, release func()) {
	s, r := make(chan struct{}), make(chan struct{})
	st.mu.Lock()
	st.afterRecord = func() {
		st.mu.Lock()
		st.afterRecord = nil
		st.mu.Unlock()
		close(s)
		<-r
	}
	st.mu.Unlock()
	return s, func() { close(r) }
}

// usageWhileHeld reads r's usage of rollout r1 in the background and
// fails t if it answers within 50 ms, while a write is held.
func usageWhileHeld(t *testing.T, ctx context.Context, r *Recorder, st *fakeStore) <-chan store.GatewayUsage {
	t.Helper()
	read := make(chan store.GatewayUsage, 1)
	go func() {
		u, err := r.usage(ctx, "r1", func(context.Context) (store.GatewayUsage, error) { return st.usage("r1"), nil })
		if err != nil {
			t.Errorf("usage: %v", err)
		}
		read <- u
	}()
	select {
	case u := <-read:
		t.Fatalf("usage answered %+v while a write of the rollout's records was under way", u)
	case <-time.After(50 * time.Millisecond):
	}
	return read
}

// TestRecorder_UsageCountsEachRecordOnceWhileItIsWritten: a rollout's
// usage (what its limits are checked against, SPEC §6.1) is its stored
// records plus its waiting ones. A store write of its records that lands
// while usage is read must neither hide a record (the store read before
// the write, the waiting records after it: a request let past its
// budget) nor count it twice (the store read after the write, the
// waiting records before its bookkeeping: a request refused too early).
func TestRecorder_UsageCountsEachRecordOnceWhileItIsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	waiting := func(t *testing.T, st *fakeStore) *Recorder {
		t.Helper()
		r := newTestRecorder(st, nil)
		for _, counted := range []bool{true, false} {
			f := r.begin(func(error) {})
			r.attach(f, "r1")
			p := rolloutRecord("r1", counted)
			p.rec.ID += fmt.Sprint(counted)
			r.finish(f, p)
		}
		return r
	}
	want := store.GatewayUsage{Calls: 2, Completions: 1}

	t.Run("a flush between the store read and the waiting records", func(t *testing.T) {
		t.Parallel()
		st := &fakeStore{now: time.Unix(100, 0)}
		r := waiting(t, st)
		reads := 0
		got, err := r.usage(ctx, "r1", func(context.Context) (store.GatewayUsage, error) {
			reads++
			u := st.usage("r1")
			if reads == 1 {
				if err := r.Flush(ctx); err != nil { // written and no longer waiting
					t.Fatal(err)
				}
			}
			return u, nil
		})
		if err != nil || got != want {
			t.Fatalf("usage = %+v, %v; want %+v", got, err, want)
		}
		if reads != 2 {
			t.Errorf("the store was read %d times, want 2 (again after the flush)", reads)
		}
	})

	t.Run("a flush stored but not yet done", func(t *testing.T) {
		t.Parallel()
		st := &fakeStore{now: time.Unix(100, 0)}
		r := waiting(t, st)
		stored, release := holdNextWrite(st)
		flushed := make(chan error, 1)
		go func() { flushed <- r.Flush(ctx) }()
		<-stored // in the store, and still in transit
		read := usageWhileHeld(t, ctx, r, st)
		release()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		if u := <-read; u != want {
			t.Fatalf("usage = %+v, want %+v", u, want)
		}
	})

	t.Run("a write under way leaves a reader that hangs up", func(t *testing.T) {
		t.Parallel()
		st := &fakeStore{now: time.Unix(100, 0)}
		r := waiting(t, st)
		stored, release := holdNextWrite(st)
		flushed := make(chan error, 1)
		go func() { flushed <- r.Flush(ctx) }()
		<-stored
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := r.usage(cctx, "r1", func(context.Context) (store.GatewayUsage, error) { return st.usage("r1"), nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("usage under a cancelled context: %v, want context.Canceled", err)
		}
		release()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a provisional record stored ahead of its flush", func(t *testing.T) {
		t.Parallel()
		st := &fakeStore{now: time.Unix(100, 0)}
		r := waiting(t, st)
		stored, release := holdNextWrite(st)
		id := "r1"
		durable := make(chan error, 1)
		go func() {
			durable <- r.makeCountDurable(ctx, store.GatewayRecord{ID: "call-provisional", TenantID: "t", AgentID: "a", RolloutID: &id, Counted: true})
		}()
		<-stored // the waiting records are in the store and not yet marked early
		read := usageWhileHeld(t, ctx, r, st)
		release()
		if err := <-durable; err != nil {
			t.Fatal(err)
		}
		if u, want := <-read, (store.GatewayUsage{Calls: 3, Completions: 2}); u != want {
			t.Fatalf("usage = %+v, want %+v", u, want)
		}
	})
}
