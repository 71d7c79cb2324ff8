package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/store"
)

// Blobs is what a build needs of the blob store: to read recorded bodies
// back and to store the file whole or not at all.
type Blobs interface {
	GetContent(ctx context.Context, key, sha string) (io.ReadCloser, error)
	PutContent(ctx context.Context, prefix string, r io.Reader) (sha string, size int64, err error)
}

// MaxAttempts is how many times a build that fails on a passing fault (a
// store or blob store error) is tried before the dataset is failed.
const MaxAttempts = 5

// Builder runs dataset build jobs from the store's durable queue: one
// replica claims a job under a lease; a replica that dies mid-build lets
// the lease lapse and another rebuilds from the frozen members, to the
// same bytes.
type Builder struct {
	st    store.Store
	blobs Blobs
	log   *slog.Logger
	wake  store.JobWaker
}

// New returns a Builder. blobs may be nil (no blob store): every build
// then fails with a reason.
func New(st store.Store, blobs Blobs, log *slog.Logger) *Builder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{st: st, blobs: blobs, log: log, wake: store.NewJobWaker()}
}

// Wake makes the builder look for due jobs now.
func (b *Builder) Wake() { b.wake.Wake() }

// Run builds due datasets until ctx ends, looking every `every` and
// whenever woken.
func (b *Builder) Run(ctx context.Context, owner string, every, lease time.Duration) {
	store.DrainJobs(ctx, every, b.wake,
		func(ctx context.Context) (int, error) { return b.RunOnce(ctx, owner, lease) },
		func(err error) { b.log.LogAttrs(ctx, slog.LevelError, "dataset build jobs", slog.Any("error", err)) })
}

// RunOnce claims and runs one due build job and reports how many it took.
func (b *Builder) RunOnce(ctx context.Context, owner string, lease time.Duration) (int, error) {
	jobs, err := b.st.ClaimJobs(ctx, owner, []string{store.JobDatasetBuild}, 1, lease)
	if err != nil {
		return 0, err
	}
	for _, j := range jobs {
		err := b.Build(ctx, j.SubjectID)
		if err != nil && !permanent(err) && j.Attempts < MaxAttempts {
			b.log.LogAttrs(ctx, slog.LevelWarn, "dataset build failed, will retry", slog.String("dataset_id", j.SubjectID),
				slog.Int("attempt", j.Attempts), slog.Any("error", err))
			backoff := min(time.Duration(1<<min(j.Attempts, 10))*time.Second, 5*time.Minute)
			if rerr := b.st.RetryJob(ctx, j, backoff, err.Error()); rerr != nil {
				return len(jobs), rerr
			}
			continue
		}
		if err != nil {
			b.log.LogAttrs(ctx, slog.LevelError, "dataset build failed", slog.String("dataset_id", j.SubjectID),
				slog.Int("attempt", j.Attempts), slog.Any("error", err))
			reason := err.Error()
			if _, ferr := b.st.FinishDataset(ctx, store.DatasetBuilt{ID: j.SubjectID, State: store.DatasetFailed,
				Reason: &reason}); ferr != nil && !errors.Is(ferr, store.ErrNotFound) {
				return len(jobs), ferr
			}
		}
		if err := b.st.FinishJob(ctx, j); err != nil {
			return len(jobs), err
		}
	}
	return len(jobs), nil
}

// errPermanent marks a build failure that no retry can fix.
var errPermanent = errors.New("dataset cannot be built")

func permanent(err error) bool {
	var ge *gyre.Error
	return errors.Is(err, errPermanent) || errors.Is(err, dataset.ErrOrder) || errors.As(err, &ge)
}

// Selection is the writers' view of a stored dataset.
func Selection(ds store.Dataset) (dataset.Selection, error) {
	sel := dataset.Selection{ID: ds.ID, CreatedAt: ds.CreatedAt, AgentID: ds.AgentID,
		Format: dataset.Format(ds.Format), HoldoutTaskIDs: ds.HoldoutTaskIDs}
	if err := json.Unmarshal(ds.Filters, &sel.Filters); err != nil {
		return sel, fmt.Errorf("%w: stored filters: %v", errPermanent, err)
	}
	return sel, nil
}

// Build writes the dataset's file, unless it is no longer building. The
// file streams from the writer to the blob store, which keeps it under a
// staging key until it is whole and only then publishes it under its
// SHA-256, so no reader ever finds a truncated file; the dataset turns
// ready only after that, with the manifest the writer returned. An error
// leaves the dataset building (the caller retries or fails it).
func (b *Builder) Build(ctx context.Context, id string) error {
	ds, err := b.st.DatasetByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // nothing left to build
	}
	if err != nil {
		return err
	}
	if ds.State != store.DatasetBuilding {
		return nil
	}
	if b.blobs == nil {
		return fmt.Errorf("%w: no blob store is configured", errPermanent)
	}
	sel, err := Selection(ds)
	if err != nil {
		return err
	}
	// The build's blob reads go through a cache of its own, shared by
	// its rollouts (see blobCache).
	src := newSource(ctx, b.st, newBlobCache(b.blobs, cacheBytes), ds)
	pr, pw := io.Pipe()
	type result struct {
		m   dataset.Manifest
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := dataset.Write(pw, sel, src)
		if err != nil {
			pw.CloseWithError(err)
		} else {
			pw.Close()
		}
		done <- result{m, err}
	}()
	prefix := "datasets/" + ds.TenantID
	sha, size, perr := b.blobs.PutContent(ctx, prefix, pr)
	pr.CloseWithError(errors.New("upload ended")) // unblock a writer the upload gave up on
	res := <-done
	if res.err != nil {
		return fmt.Errorf("write dataset %s: %w", id, res.err)
	}
	if perr != nil {
		return fmt.Errorf("store dataset %s: %w", id, perr)
	}
	if sha != res.m.FileSHA256 || size != res.m.FileBytes {
		return fmt.Errorf("store dataset %s: stored %s (%d bytes), wrote %s (%d bytes)", id, sha, size,
			res.m.FileSHA256, res.m.FileBytes)
	}
	manifest, err := json.Marshal(res.m)
	if err != nil {
		return err
	}
	key, err := blobstore.KeyFor(prefix, sha)
	if err != nil {
		return err
	}
	_, err = b.st.FinishDataset(ctx, store.DatasetBuilt{ID: id, State: store.DatasetReady, FileSHA256: sha,
		FileBytes: size, BlobKey: key, Manifest: manifest})
	return err
}
