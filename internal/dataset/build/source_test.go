package build

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// seeded is a SQLite store and file blob store holding n seeded
// training-grade rollouts of one tenant.
type seeded struct {
	st     store.Store
	blobs  *blobstore.Store
	tenant string
}

func newSeeded(t *testing.T, n int) seeded {
	t.Helper()
	ctx := t.Context()
	data := filepath.Join(t.TempDir(), "data")
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blobstore.Open(ctx, "", data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	tn, err := st.CreateTenant(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := seed.Rollouts(ctx, st, blobs, tn.ID, n); err != nil || got != n {
		t.Fatalf("seeded %d, %v; want %d", got, err, n)
	}
	return seeded{st: st, blobs: blobs, tenant: tn.ID}
}

// dataset freezes an sft dataset of every seeded rollout.
func (s seeded) dataset(t *testing.T) store.Dataset {
	t.Helper()
	ds, err := s.st.CreateDataset(t.Context(), store.NewDataset{ID: uuid.Must(uuid.NewV7()).String(), TenantID: s.tenant,
		AgentID: seed.Agent, Format: string(dataset.FormatSFT), Filters: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// build runs the build job of a new dataset and returns its manifest.
func (s seeded) build(t *testing.T, b *Builder) dataset.Manifest {
	t.Helper()
	ds := s.dataset(t)
	if err := b.Build(t.Context(), ds.ID); err != nil {
		t.Fatal(err)
	}
	ds, err := s.st.DatasetByID(t.Context(), ds.ID)
	if err != nil || ds.State != store.DatasetReady {
		t.Fatalf("dataset %+v, %v; want ready", ds, err)
	}
	var m dataset.Manifest
	if err := json.Unmarshal(ds.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A build reads more distinct blobs than its cache may hold (each rollout
// has its own request documents, user message and second response): the
// cache stays within its cap all along, is full by the end, and the file
// is byte for byte the one a build with the default cache writes.
func TestBlobCache_StaysWithinItsCapOverABuild(t *testing.T) {
	t.Parallel()
	const n, capBytes = 40, 16 << 10
	s := newSeeded(t, n)
	ctx := t.Context()

	want := s.build(t, New(s.st, s.blobs, nil))

	ds := s.dataset(t)
	sel, err := Selection(ds)
	if err != nil {
		t.Fatal(err)
	}
	cache := newBlobCache(s.blobs, capBytes)
	src := newSource(ctx, s.st, cache, ds)
	var read int
	var over []string
	checked := sourceFunc(func() iter.Seq2[*dataset.Rollout, error] {
		return func(yield func(*dataset.Rollout, error) bool) {
			for r, err := range src.Rollouts() {
				if _, size := cache.held(); size > capBytes {
					over = append(over, fmt.Sprintf("%d bytes after %d rollouts", size, read))
				}
				read++
				if !yield(r, err) {
					return
				}
			}
		}
	})
	var file bytes.Buffer
	got, err := dataset.Write(&file, sel, checked)
	if err != nil {
		t.Fatal(err)
	}
	if len(over) > 0 {
		t.Errorf("the cache grew past its cap of %d bytes: %v", capBytes, over)
	}
	held, size := cache.held()
	if read != n || size < capBytes-1024 || held >= 5*n {
		t.Errorf("after %d rollouts the cache holds %d blobs in %d bytes; want it full (≥ %d bytes) and evicting",
			read, held, size, capBytes-1024)
	}
	if got.FileSHA256 != want.FileSHA256 || got.Rows != n {
		t.Errorf("with a %d-byte cache: %d rows, sha-256 %s; with the build's cache: %d rows, %s",
			capBytes, got.Rows, got.FileSHA256, want.Rows, want.FileSHA256)
	}
}

// A blob deleted after a build is missing for the next build of the same
// builder, which counts the rollout under bodies_missing rather than
// exporting it from a copy the earlier build kept; a missing blob that
// every rollout shares leaves out every rollout, not only the first that
// read it.
func TestBuild_MissingBlobIsBodiesMissingNeverACachedCopy(t *testing.T) {
	t.Parallel()
	const n = 10
	s := newSeeded(t, n)
	ctx := t.Context()
	b := New(s.st, s.blobs, nil)

	if m := s.build(t, b); m.Rows != n || len(m.NotExportedByReason) != 0 {
		t.Fatalf("first build: %d rows, left out %v; want %d, none", m.Rows, m.NotExportedByReason, n)
	}
	// Rollout 3's own second response goes.
	ids := s.rolloutIDs(t)
	calls, err := s.st.GatewayCalls(ctx, s.tenant, ids[3])
	if err != nil || len(calls) != 2 {
		t.Fatalf("calls %+v, %v", calls, err)
	}
	if err := s.blobs.Delete(ctx, *calls[1].ResponseBlob); err != nil {
		t.Fatal(err)
	}
	if m := s.build(t, b); m.Rows != n-1 || m.NotExportedByReason[ReasonBodiesMissing] != 1 {
		t.Errorf("after deleting one rollout's blob: %d rows, left out %v; want %d, 1 %s",
			m.Rows, m.NotExportedByReason, n-1, ReasonBodiesMissing)
	}
	// The first response is every rollout's.
	if err := s.blobs.Delete(ctx, *calls[0].ResponseBlob); err != nil {
		t.Fatal(err)
	}
	if m := s.build(t, b); m.Rows != 0 || m.NotExportedByReason[ReasonBodiesMissing] != n {
		t.Errorf("after deleting a shared blob: %d rows, left out %v; want 0, %d %s",
			m.Rows, m.NotExportedByReason, n, ReasonBodiesMissing)
	}
}

func (s seeded) rolloutIDs(t *testing.T) []string {
	t.Helper()
	ds := s.dataset(t)
	ms, err := s.st.DatasetMembers(t.Context(), ds.ID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.RolloutID
	}
	return ids
}

// sourceFunc is a dataset.Source of rollouts only.
type sourceFunc func() iter.Seq2[*dataset.Rollout, error]

func (f sourceFunc) Rollouts() iter.Seq2[*dataset.Rollout, error] { return f() }
func (f sourceFunc) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		yield(nil, errors.New("no groups"))
	}
}

// A cache hit is the bytes first read; a failed read is not kept.
func TestBlobCache_KeepsReadsNotFailures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var reads int
	blobs := blobReaderFunc(func(key string) (io.ReadCloser, error) {
		reads++
		if key == "gone" {
			return nil, blobstore.ErrNotFound
		}
		return io.NopCloser(bytes.NewReader([]byte("body of " + key))), nil
	})
	c := newBlobCache(blobs, 1<<20)
	for range 3 {
		rc, err := c.GetContent(ctx, "a", "sha")
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(rc); string(b) != "body of a" {
			t.Fatalf("read %q", b)
		}
		if _, err := c.GetContent(ctx, "gone", "sha"); !errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("missing blob: %v, want ErrNotFound", err)
		}
	}
	if reads != 4 {
		t.Errorf("%d reads of the blob store; want 4 (a once, gone each time)", reads)
	}
}

type blobReaderFunc func(key string) (io.ReadCloser, error)

func (f blobReaderFunc) GetContent(_ context.Context, key, _ string) (io.ReadCloser, error) {
	return f(key)
}

// readInOrder yields the rollouts in the members' order however their
// reads finish, stops at the first error, and leaves no read running when
// its consumer stops early (synctest fails a test whose goroutines
// outlive it).
func TestReadInOrder_KeepsMemberOrderAndStopsCleanly(t *testing.T) {
	t.Parallel()
	members := func(n int) iter.Seq2[store.DatasetMember, error] {
		return func(yield func(store.DatasetMember, error) bool) {
			for i := range n {
				if !yield(store.DatasetMember{RolloutID: fmt.Sprintf("r%03d", i)}, nil) {
					return
				}
			}
		}
	}
	// Later members finish first: each read waits less than the one
	// before.
	read := func(fail string) func(store.DatasetMember) (*dataset.Rollout, error) {
		return func(m store.DatasetMember) (*dataset.Rollout, error) {
			var i int
			fmt.Sscanf(m.RolloutID, "r%d", &i)
			time.Sleep(time.Duration(100-i) * time.Millisecond)
			if m.RolloutID == fail {
				return nil, errors.New("read failed")
			}
			return &dataset.Rollout{ID: m.RolloutID}, nil
		}
	}
	for _, tc := range []struct {
		name    string
		n       int
		fail    string
		stopAt  int
		want    int
		wantErr bool
	}{
		{name: "all", n: 50, want: 50},
		{name: "consumer stops early", n: 50, stopAt: 5, want: 5},
		{name: "a read fails", n: 50, fail: "r020", want: 20, wantErr: true},
		{name: "none", n: 0, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var got []string
				var gotErr error
				for r, err := range readInOrder(t.Context(), members(tc.n), read(tc.fail)) {
					if err != nil {
						gotErr = err
						break
					}
					got = append(got, r.ID)
					if len(got) == tc.stopAt {
						break
					}
				}
				want := make([]string, tc.want)
				for i := range want {
					want[i] = fmt.Sprintf("r%03d", i)
				}
				if !slices.Equal(got, want) || (gotErr != nil) != tc.wantErr {
					t.Errorf("got %v, %v; want %v, error %v", got, gotErr, want, tc.wantErr)
				}
			})
		})
	}
}
