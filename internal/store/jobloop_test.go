package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// DrainJobs takes jobs until a round takes none, looks again at each tick
// and at each wake, reports failures without retrying before its next
// look, and stops when its context ends.
func TestDrainJobs_DrainsThenWaitsForATickOrAWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		w := NewJobWaker()
		var due, calls, failures atomic.Int64
		var fail atomic.Bool
		due.Store(3) // jobs due now
		done := make(chan struct{})
		go func() {
			defer close(done)
			DrainJobs(ctx, time.Minute, w, func(context.Context) (int, error) {
				calls.Add(1)
				if fail.CompareAndSwap(true, false) {
					return 0, errors.New("store down")
				}
				if due.Load() > 0 {
					due.Add(-1)
					return 1, nil
				}
				return 0, nil
			}, func(error) { failures.Add(1) })
		}()
		synctest.Wait()
		if calls.Load() != 4 || due.Load() != 0 {
			t.Fatalf("after the first drain: %d calls, %d jobs left; want 4 calls, none left", calls.Load(), due.Load())
		}
		due.Store(1)
		w.Wake()
		synctest.Wait()
		if calls.Load() != 6 {
			t.Fatalf("a wake made %d calls in all, want 6", calls.Load())
		}
		fail.Store(true)
		time.Sleep(time.Minute)
		synctest.Wait()
		if calls.Load() != 7 || failures.Load() != 1 {
			t.Fatalf("a tick with a failing store: %d calls, %d failures; want 7 and 1", calls.Load(), failures.Load())
		}
		cancel()
		<-done
	})
}
