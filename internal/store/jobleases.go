package store

import (
	"context"
	"errors"
	"time"
)

// ErrJobHeld is returned by ClaimJob when another claim holds the job's
// lease.
var ErrJobHeld = errors.New("job held by another claim")

// JobLeaseStore leases one named job rather than the next due ones, and
// keeps a running job's lease alive. A process that runs a job it just
// queued (gyre dataset export on the store directly) claims that job, so
// the servers' consumers of the queue leave it alone while it runs and
// take it over once its lease lapses.
type JobLeaseStore interface {
	// ClaimJob leases the job (kind, subjectID) for owner until now +
	// lease, whether or not it is due yet, unless another claim holds an
	// unexpired lease on it (ErrJobHeld). ErrNotFound when there is no
	// such job: it was finished.
	ClaimJob(ctx context.Context, owner, kind, subjectID string, lease time.Duration) (Job, error)
	// RenewJob moves the lease of a job this claim holds to now + lease.
	// ErrLeaseLost when the claim no longer holds it: the job was
	// finished, enqueued again, or taken by another after its lease
	// lapsed.
	RenewJob(ctx context.Context, j Job, lease time.Duration) error
}
