package gateway_test

import (
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/gateway"
)

// TestRecorder_FlushBatchStartsAFlushEarly: FlushBatch waiting records
// start a flush before FlushInterval is up, so no flush grows into a long
// CPU burst that holds requests up; fewer records wait for the interval.
func TestRecorder_FlushBatchStartsAFlushEarly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{FlushInterval: time.Hour, ReplicaTTL: 3 * time.Hour, FlushBatch: 2}})
	rr := h.rollout(`,"policy":"p1"`)
	cl := h.client(rr)
	complete(t, cl)
	complete(t, cl)
	// The interval is an hour: only the batch trigger can flush in time.
	deadline := time.Now().Add(30 * time.Second)
	for h.gw.Recorder().Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records still wait with FlushBatch 2 waiting: no early flush\nlogs:\n%s", h.gw.Recorder().Pending(), h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	complete(t, cl)
	time.Sleep(200 * time.Millisecond)
	if n := h.gw.Recorder().Pending(); n != 1 {
		t.Fatalf("%d records wait, want the lone third one waiting for the interval", n)
	}
}
