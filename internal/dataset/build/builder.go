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
	// ticker ticks every d (a lease renewal, a progress report) until
	// stop. Tests replace it.
	ticker func(d time.Duration) (tick <-chan time.Time, stop func())
}

// New returns a Builder. blobs may be nil (no blob store): every build
// then fails with a reason.
func New(st store.Store, blobs Blobs, log *slog.Logger) *Builder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{st: st, blobs: blobs, log: log, wake: store.NewJobWaker(), ticker: realTicker}
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
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
		if _, err := b.run(ctx, j, lease, nil); err != nil {
			return len(jobs), err
		}
	}
	return len(jobs), nil
}

// ErrHeld is returned by BuildNow when another process holds the
// dataset's build job: it builds the dataset, and the caller waits for
// the outcome.
var ErrHeld = errors.New("another process is building the dataset")

// BuildNow builds dataset id here and now, holding its build job's lease
// for owner (and renewing it while it builds), so no replica of gyre
// serve builds it at the same time. A build that cannot finish here (the
// process dies, ctx ends) leaves the job to its lease: once the lease
// lapses, a replica claims the job and builds the dataset again from its
// frozen members, to the same bytes. It returns ErrHeld when another
// claim holds the job, nil without building when the job is gone (the
// dataset was built), and otherwise the build's own error, after the job
// was settled as RunOnce settles it (due again later, or the dataset
// failed). p, when not nil, counts the build's progress.
func (b *Builder) BuildNow(ctx context.Context, owner, id string, lease time.Duration, p *Progress) error {
	j, err := b.st.ClaimJob(ctx, owner, store.JobDatasetBuild, id, lease)
	if errors.Is(err, store.ErrJobHeld) {
		return ErrHeld
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	built, err := b.run(ctx, j, lease, p)
	if err != nil {
		return err
	}
	return built
}

// run runs a claimed build job while holding its lease, then settles the
// job: finished when built or failed for good (the dataset failed with
// the reason), due again after a backoff on a passing fault. It returns
// the build's error (built) and an error settling the job (err). A build
// stopped because ctx ended or the lease was lost settles nothing: the
// lease lapses (or has) and a replica builds the dataset again.
func (b *Builder) run(ctx context.Context, j store.Job, lease time.Duration, p *Progress) (built, err error) {
	if p == nil {
		p = new(Progress)
	}
	hctx, lost := context.WithCancelCause(ctx)
	held := make(chan struct{})
	go func() {
		defer close(held)
		b.hold(hctx, lost, j, lease)
	}()
	built = b.build(hctx, j.SubjectID, p)
	lost(nil)
	<-held
	if ctx.Err() != nil {
		return built, ctx.Err()
	}
	if cause := context.Cause(hctx); built != nil && errors.Is(cause, store.ErrLeaseLost) {
		b.log.LogAttrs(ctx, slog.LevelWarn, "dataset build lost its lease, another replica builds it",
			slog.String("dataset_id", j.SubjectID), slog.Any("error", cause))
		return cause, nil
	}
	if built != nil && !permanent(built) && j.Attempts < MaxAttempts {
		b.log.LogAttrs(ctx, slog.LevelWarn, "dataset build failed, will retry", slog.String("dataset_id", j.SubjectID),
			slog.Int("attempt", j.Attempts), slog.Any("error", built))
		backoff := min(time.Duration(1<<min(j.Attempts, 10))*time.Second, 5*time.Minute)
		return built, b.st.RetryJob(ctx, j, backoff, built.Error())
	}
	if built != nil {
		b.log.LogAttrs(ctx, slog.LevelError, "dataset build failed", slog.String("dataset_id", j.SubjectID),
			slog.Int("attempt", j.Attempts), slog.Any("error", built))
		reason := built.Error()
		if _, ferr := b.st.FinishDataset(ctx, store.DatasetBuilt{ID: j.SubjectID, State: store.DatasetFailed,
			Reason: &reason}); ferr != nil && !errors.Is(ferr, store.ErrNotFound) {
			return built, ferr
		}
	}
	return built, b.st.FinishJob(ctx, j)
}

// ProgressEvery is how often a running build records its progress on the
// dataset, for GET /api/v1/datasets/{id} and gyre dataset export.
const ProgressEvery = time.Second

// report records p on dataset id: 0 now (a rebuild starts again), then
// every ProgressEvery until stop. A failed report is skipped: progress is
// for display only.
func (b *Builder) report(ctx context.Context, id string, p *Progress) (stop func(), err error) {
	if err := b.st.SetDatasetProgress(ctx, id, store.DatasetProgress{}); err != nil {
		return nil, err
	}
	tick, stopTick := b.ticker(ProgressEvery)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick:
			}
			if err := b.st.SetDatasetProgress(ctx, id, store.DatasetProgress{Rollouts: p.Rollouts(), Rows: p.Rows()}); err != nil && ctx.Err() == nil {
				b.log.LogAttrs(ctx, slog.LevelWarn, "record a dataset build's progress", slog.String("dataset_id", id),
					slog.Any("error", err))
			}
		}
	}()
	return func() { stopTick(); close(done); <-ended }, nil
}

// hold extends the lease of the running job j every third of the lease
// until ctx ends. When the lease is lost (it lapsed and another claimed
// the job) it cancels the build through lost; a failed extension is
// tried again at the next tick, while the lease still runs.
func (b *Builder) hold(ctx context.Context, lost context.CancelCauseFunc, j store.Job, lease time.Duration) {
	tick, stop := b.ticker(max(lease/3, time.Millisecond))
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		err := b.st.RenewJob(ctx, j, lease)
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			lost(err)
			return
		case err != nil && ctx.Err() == nil:
			b.log.LogAttrs(ctx, slog.LevelWarn, "extend a dataset build's lease", slog.String("dataset_id", j.SubjectID),
				slog.Any("error", err))
		}
	}
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
func (b *Builder) Build(ctx context.Context, id string) error { return b.build(ctx, id, nil) }

func (b *Builder) build(ctx context.Context, id string, p *Progress) error {
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
	var src dataset.Source = newSource(ctx, b.st, newBlobCache(b.blobs, cacheBytes), ds)
	var out io.Writer
	pr, pw := io.Pipe()
	out = pw
	if p != nil {
		src = countingSource{src, p}
		out = rowCounter{pw, p}
		stop, err := b.report(ctx, id, p)
		if err != nil {
			return err
		}
		defer stop()
	}
	type result struct {
		m   dataset.Manifest
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := dataset.Write(out, sel, src)
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
	if p != nil {
		// The last report, so that a ready dataset shows what its build did.
		if err := b.st.SetDatasetProgress(ctx, id, store.DatasetProgress{Rollouts: p.Rollouts(), Rows: p.Rows()}); err != nil {
			return err
		}
	}
	_, err = b.st.FinishDataset(ctx, store.DatasetBuilt{ID: id, State: store.DatasetReady, FileSHA256: sha,
		FileBytes: size, BlobKey: key, Manifest: manifest})
	return err
}
