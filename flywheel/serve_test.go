package flywheel_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// blockUntilStopped is a handler that runs until its context ends and
// records the cause and when.
type blockUntilStopped struct {
	mu     sync.Mutex
	cause  error
	at     time.Time
	calls  atomic.Int64
	output flywheel.RolloutOutput
}

func (b *blockUntilStopped) HandleRollout(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
	b.calls.Add(1)
	<-ctx.Done()
	b.mu.Lock()
	b.cause, b.at = context.Cause(ctx), time.Now()
	b.mu.Unlock()
	out := b.output
	if out.FinalText == "" {
		out.FinalText = "stopped"
	}
	return out, nil
}

func (b *blockUntilStopped) stopped() (error, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cause, b.at
}

func TestServe_HeartbeatsEveryThirdOfTheGrantOnTheServersClock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		skew  time.Duration
		lease time.Duration
		every time.Duration
	}{
		{"clocks in step", 0, 30 * time.Second, 10 * time.Second},
		// If the worker ignored the Date header, an hour of skew would
		// read as an hour-long grant.
		{"server an hour ahead", time.Hour, 30 * time.Second, 10 * time.Second},
		{"server an hour behind", -time.Hour, 30 * time.Second, 10 * time.Second},
		{"short grant beats at the 1 s minimum", 0, 2 * time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeServer(t, "q")
				f.skew, f.lease, f.deadline = tc.skew, tc.lease, 100*time.Second
				h := &blockUntilStopped{}
				start := time.Now()
				err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { return len(f.outputsOf("r1")) > 0 })
				if err != nil {
					t.Fatal(err)
				}
				beats := f.beatTimes("r1")
				if len(beats) < 5 {
					t.Fatalf("%d heartbeats in 100 s", len(beats))
				}
				// The Date header has one-second resolution, so the clock
				// offset, and the grant read with it, may be off by up to a
				// second: the cadence by up to a third of that.
				prev := start
				for i, b := range beats {
					if got := b.Sub(prev); got < tc.every-time.Second/3-time.Millisecond || got > tc.every+time.Second/3 {
						t.Fatalf("heartbeat %d came %s after the previous one, want %s", i, got, tc.every)
					}
					prev = b
				}
				cause, at := h.stopped()
				if !errors.Is(cause, flywheel.ErrRolloutDeadline) {
					t.Errorf("cause = %v, want ErrRolloutDeadline", cause)
				}
				if got := at.Sub(start); got < 99*time.Second || got > 101*time.Second {
					t.Errorf("stopped %s after the claim, want at deadline_ts (100 s)", got)
				}
				outs := f.outputsOf("r1")
				if len(outs) != 1 {
					t.Fatalf("%d outputs", len(outs))
				}
				ex, _ := outs[0]["exclusion"].(map[string]any)
				if ex["reason"] != "deadline_exceeded" {
					t.Errorf("exclusion = %v, want deadline_exceeded", outs[0]["exclusion"])
				}
				if v, ok := outs[0]["tool_calls"]; !ok || v != nil {
					t.Errorf("tool_calls = %v (present %t), want null", v, ok)
				}
			})
		})
	}
}

func TestServe_ObeysPollAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.pollAfterMS = 3000
		err := serveUntil(t, f, flywheel.ServeConfig{}, &blockUntilStopped{}, func() bool { return len(f.claimsSeen()) >= 4 })
		if err != nil {
			t.Fatal(err)
		}
		claims := f.claimsSeen()
		for i := 1; i < len(claims); i++ {
			if got := claims[i].at.Sub(claims[i-1].at); got != 3*time.Second {
				t.Errorf("claim %d came %s after the previous one, want poll_after_ms (3 s)", i, got)
			}
			if claims[i].idem == claims[i-1].idem {
				t.Errorf("claims %d and %d share an idempotency key", i-1, i)
			}
		}
	})
}

func TestServe_LongPollsWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		err := serveUntil(t, f, flywheel.ServeConfig{PollWait: 7 * time.Second}, &blockUntilStopped{}, func() bool { return len(f.claimsSeen()) >= 1 })
		if err != nil {
			t.Fatal(err)
		}
		if c := f.claimsSeen()[0]; c.wait != "7000" || c.max != 1 {
			t.Errorf("claim wait_ms = %q max_rollouts = %d, want 7000 and 1", c.wait, c.max)
		}
	})
}

func TestServe_BacksOffOnTransportErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.pollAfterMS = 1000
		f.claimHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
			switch n {
			case 1:
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			case 2, 3, 4:
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		}
		err := serveUntil(t, f, flywheel.ServeConfig{}, &blockUntilStopped{}, func() bool { return len(f.claimsSeen()) >= 6 })
		if err != nil {
			t.Fatal(err)
		}
		c := f.claimsSeen()
		gap := func(i int) time.Duration { return c[i].at.Sub(c[i-1].at) }
		if gap(1) != 7*time.Second {
			t.Errorf("after Retry-After: 7 the worker waited %s", gap(1))
		}
		if c[1].idem != c[0].idem {
			t.Errorf("a retried claim must keep its idempotency key")
		}
		// Exponential with jitter: the n-th failure waits within
		// [d/2, d], d = 500 ms·2ⁿ.
		for i, d := range map[int]time.Duration{2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second} {
			if g := gap(i); g < d/2 || g > d {
				t.Errorf("backoff before claim %d = %s, want within [%s, %s]", i, g, d/2, d)
			}
		}
		// A success resets it: the next claim obeys poll_after_ms.
		if gap(5) != time.Second {
			t.Errorf("after a success the worker waited %s, want poll_after_ms", gap(5))
		}
	})
}

func TestServe_StopsOnARefusedKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.claimHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"no"}}`))
			return true
		}
		err := serveUntil(t, f, flywheel.ServeConfig{}, &blockUntilStopped{}, func() bool { return false })
		var ae *flywheel.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 401 {
			t.Fatalf("Serve = %v, want the 401", err)
		}
		if n := len(f.claimsSeen()); n != 1 {
			t.Errorf("%d claims after a 401, want 1", n)
		}
	})
}

func TestServe_LeaseLostStopsTheHandlerAndReportsNothing(t *testing.T) {
	for _, status := range []int{409, 410, 404} {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeServer(t, "q")
			f.beatStatus = func(id string, n int) int {
				if n == 2 {
					return status
				}
				return 200
			}
			h := &blockUntilStopped{}
			err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { c, _ := h.stopped(); return c != nil })
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			cause, _ := h.stopped()
			if !errors.Is(cause, flywheel.ErrLeaseLost) && !errors.Is(cause, flywheel.ErrRolloutFinished) {
				t.Errorf("status %d: cause = %v, want the lease lost", status, cause)
			}
			if outs := f.outputsOf("r1"); len(outs) != 0 {
				t.Errorf("status %d: %d outputs after the lease was lost", status, len(outs))
			}
		})
	}
}

func TestServe_TransientHeartbeatFailuresKeepTheRollout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "q")
		f.deadline = 40 * time.Second
		f.beatStatus = func(id string, n int) int {
			if n == 2 {
				return 503
			}
			return 200
		}
		h := &blockUntilStopped{}
		err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { return len(f.outputsOf("r1")) > 0 })
		if err != nil {
			t.Fatal(err)
		}
		beats := f.beatTimes("r1")
		// 10 s, 20 s (503), then a retry a quarter of the cadence later.
		if len(beats) < 3 || beats[2].Sub(beats[1]) != 2500*time.Millisecond {
			t.Errorf("beats at %v: want a quicker retry after the 503", beats)
		}
		if cause, _ := h.stopped(); !errors.Is(cause, flywheel.ErrRolloutDeadline) {
			t.Errorf("cause = %v", cause)
		}
	})
}

func TestServe_RejectedOutputIsFollowedByAMinimalOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "q")
		f.outputStatus = func(id string, n int) (int, string) {
			if n == 1 {
				return 422, `{"error":{"code":"invalid_body","message":"status_code must be null","pointer":"/tool_calls/0/status_code"}}`
			}
			return 200, ""
		}
		h := flywheel.HandlerFunc(func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
			r.SetFallbackText("the agent's stdout")
			return flywheel.RolloutOutput{
				FinalText: "from the report",
				ToolCalls: flywheel.ReportedToolCalls([]flywheel.ToolCallRecord{{Name: "x", Outcome: flywheel.OutcomeOK}}),
				Success:   flywheel.Some(true),
			}, nil
		})
		err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { return len(f.outputsOf("r1")) >= 2 })
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		outs := f.outputsOf("r1")
		if len(outs) != 2 {
			t.Fatalf("%d outputs, want the rejected one and one minimal one", len(outs))
		}
		m := outs[1]
		if m["final_text"] != "the agent's stdout" || m["tool_calls"] != nil || m["success"] != nil {
			t.Errorf("minimal output = %v", m)
		}
		evs, _ := m["events"].([]any)
		if len(evs) != 1 {
			t.Fatalf("events = %v", m["events"])
		}
		ev := evs[0].(map[string]any)
		if ev["type"] != "output_rejected" || ev["status"] != float64(422) || ev["pointer"] != "/tool_calls/0/status_code" {
			t.Errorf("event = %v", ev)
		}
	})
}

func TestServe_HandlerFaultsAreFlywheelCrash(t *testing.T) {
	for name, h := range map[string]flywheel.HandlerFunc{
		"error": func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
			return flywheel.RolloutOutput{}, errors.New("disk full")
		},
		"panic": func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
			panic("bug")
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeServer(t, "q")
				err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { return len(f.outputsOf("r1")) > 0 })
				if err != nil {
					t.Fatal(err)
				}
				ex, _ := f.outputsOf("r1")[0]["exclusion"].(map[string]any)
				if ex["reason"] != "flywheel_crash" {
					t.Errorf("exclusion = %v", ex)
				}
			})
		})
	}
}

func TestServe_AStuckHandlerIsLeftBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "q")
		f.deadline = 10 * time.Second
		release := make(chan struct{})
		h := flywheel.HandlerFunc(func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
			<-release // ignores ctx
			return flywheel.RolloutOutput{FinalText: "late"}, nil
		})
		start := time.Now()
		err := serveUntil(t, f, flywheel.ServeConfig{StopGrace: 5 * time.Second}, h, func() bool { return len(f.outputsOf("r1")) > 0 })
		close(release)
		if err != nil {
			t.Fatal(err)
		}
		outs := f.outputsOf("r1")
		ex, _ := outs[0]["exclusion"].(map[string]any)
		if ex["reason"] != "deadline_exceeded" {
			t.Errorf("exclusion = %v", ex)
		}
		if got := time.Since(start); got < 15*time.Second {
			t.Errorf("reported after %s, want deadline + stop grace", got)
		}
	})
}

func TestServe_DrainLetsRunningRolloutsFinishThenCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "q", "q2")
		f.deadline = time.Hour
		h := &blockUntilStopped{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- flywheel.Serve(ctx, flywheel.ServeConfig{Client: f.client(), AgentID: "agent-1", Root: t.TempDir(),
				WorkerID: "w", PollWait: -1, Drain: 5 * time.Second}, h)
		}()
		synctest.Wait()
		if h.calls.Load() != 1 {
			t.Fatalf("%d rollouts running, want 1 (concurrency 1)", h.calls.Load())
		}
		claims := len(f.claimsSeen())
		stopAt := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		cause, at := h.stopped()
		if !errors.Is(cause, flywheel.ErrDraining) || at.Sub(stopAt) != 5*time.Second {
			t.Errorf("stopped by %v after %s, want ErrDraining after the 5 s drain", cause, at.Sub(stopAt))
		}
		ex, _ := f.outputsOf("r1")[0]["exclusion"].(map[string]any)
		if ex["reason"] != "cancelled" {
			t.Errorf("exclusion = %v, want cancelled", ex)
		}
		if n := len(f.claimsSeen()); n != claims {
			t.Errorf("%d claims during the drain, want none", n-claims)
		}
	})
}

func TestServe_StopEndsTheDrainAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "q")
		f.deadline = time.Hour
		h := &blockUntilStopped{}
		stop := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- flywheel.Serve(ctx, flywheel.ServeConfig{Client: f.client(), AgentID: "agent-1", Root: t.TempDir(),
				WorkerID: "w", PollWait: -1, Drain: time.Hour, Stop: stop}, h)
		}()
		synctest.Wait()
		cancel()
		time.Sleep(time.Second)
		close(stop)
		<-done
		if cause, _ := h.stopped(); !errors.Is(cause, flywheel.ErrDraining) {
			t.Errorf("cause = %v", cause)
		}
	})
}

func TestServe_ReleasesWhatItCannotStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.claimHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n == 1 {
				f.answer(w, []string{"a", "b", "c"}, 0) // more than the one slot asked for
				return true
			}
			return false
		}
		f.releaseStatus = 0
		h := &blockUntilStopped{}
		err := serveUntil(t, f, flywheel.ServeConfig{}, h, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.releases) >= 2 })
		if err != nil {
			t.Fatal(err)
		}
		if h.calls.Load() != 1 {
			t.Errorf("%d handlers ran, want 1", h.calls.Load())
		}
		f.mu.Lock()
		rel := f.releases
		f.mu.Unlock()
		if len(rel) != 2 || rel[0] != "r2" || rel[1] != "r3" {
			t.Errorf("released %v, want r2 and r3", rel)
		}
	})
}

func TestServe_ReportsCapacityWhenReleaseFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.claimHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n == 1 {
				f.answer(w, []string{"a", "b"}, 0)
				return true
			}
			return false
		}
		f.releaseStatus = 400
		err := serveUntil(t, f, flywheel.ServeConfig{}, &blockUntilStopped{}, func() bool { return len(f.outputsOf("r2")) > 0 })
		if err != nil {
			t.Fatal(err)
		}
		ex, _ := f.outputsOf("r2")[0]["exclusion"].(map[string]any)
		if ex["reason"] != "capacity" {
			t.Errorf("exclusion = %v, want capacity", ex)
		}
	})
}

func TestServe_RecoversAClaimInterruptedByTheStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t)
		f.claimHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n == 1 {
				<-r.Context().Done() // a long-poll cut off by the stop
				return true
			}
			f.answer(w, []string{"leased by the interrupted claim"}, 0)
			return true
		}
		h := &blockUntilStopped{}
		err := serveUntil(t, f, flywheel.ServeConfig{PollWait: 20 * time.Second}, h, func() bool { return len(f.claimsSeen()) >= 1 })
		if err != nil {
			t.Fatal(err)
		}
		c := f.claimsSeen()
		if len(c) != 2 || c[1].idem != c[0].idem || c[1].wait != "" {
			t.Fatalf("claims = %+v, want one recovery claim with the same key and no wait", c)
		}
		f.mu.Lock()
		rel := f.releases
		f.mu.Unlock()
		if len(rel) != 1 || h.calls.Load() != 0 {
			t.Errorf("released %v, ran %d: the recovered rollout must be released, not run", rel, h.calls.Load())
		}
	})
}

func TestServe_RunsRolloutsConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(t, "a", "b", "c", "d", "e")
		f.deadline = 30 * time.Second
		var running, peak atomic.Int64
		h := flywheel.HandlerFunc(func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Second)
			running.Add(-1)
			if r.ArtifactsDir == "" || r.PrivateDir == "" {
				return flywheel.RolloutOutput{}, errors.New("directories not prepared")
			}
			return flywheel.RolloutOutput{FinalText: r.Request.TurnInput, ToolCalls: flywheel.ReportedToolCalls(nil)}, nil
		})
		err := serveUntil(t, f, flywheel.ServeConfig{Concurrency: 3}, h, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.outputs) == 5
		})
		if err != nil {
			t.Fatal(err)
		}
		if peak.Load() != 3 {
			t.Errorf("peak concurrency %d, want 3", peak.Load())
		}
		for _, c := range f.claimsSeen() {
			if c.max < 1 || c.max > 3 {
				t.Errorf("claim asked for %d rollouts with 3 slots", c.max)
			}
		}
		for i := 1; i <= 5; i++ {
			out := f.outputsOf("r" + string(rune('0'+i)))[0]
			if calls, ok := out["tool_calls"].([]any); !ok || len(calls) != 0 || out["exclusion"] != nil {
				t.Errorf("r%d: output %v, want tool_calls [] and no exclusion", i, out)
			}
		}
	})
}
