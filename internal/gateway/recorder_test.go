package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.flushes = append(f.flushes, fl)
	return nil
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
