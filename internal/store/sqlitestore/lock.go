package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gyrehq/gyre/internal/store/sqlstore"
)

// lockPoll is how often a waiting migration retries the lock file.
const lockPoll = 20 * time.Millisecond

// migrationLock returns the Locker that serialises migrations of the
// database at path: an exclusive flock(2) on "<path>.migrate.lock". flock
// locks belong to an open file description, so the lock excludes other
// processes and other opens in this process alike, and the kernel releases
// it when its holder exits, however it exits. The lock file is left in
// place: removing it would let two processes lock two different inodes.
func migrationLock(path string) sqlstore.Locker {
	name := path + ".migrate.lock"
	return func(ctx context.Context) (func() error, error) {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open lock file: %w", err)
		}
		fd := int(f.Fd())
		for {
			err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
				return nil, errors.Join(fmt.Errorf("flock %s: %w", name, err), f.Close())
			}
			if err := sleep(ctx, lockPoll); err != nil {
				return nil, errors.Join(fmt.Errorf("wait for %s: %w", name, err), f.Close())
			}
		}
		return func() error {
			return errors.Join(unix.Flock(fd, unix.LOCK_UN), f.Close())
		}, nil
	}
}

// sleep waits for d or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
