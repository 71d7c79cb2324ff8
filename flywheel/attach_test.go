package flywheel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/worker/workertest"
)

// turnsServer is an in-memory POST /turns that records every batch and
// answers through answer (default: all accepted).
type turnsServer struct {
	t       *testing.T
	mu      sync.Mutex
	batches [][]string // turn ids per request
	times   []time.Time
	answer  func(n int, ids []string) (int, string)
}

func (s *turnsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if err := flywheel.Validate(flywheel.DefProductionTurnBatch, b); err != nil {
		s.t.Errorf("Attach sent a batch that breaks the contract: %v", err)
	}
	var batch flywheel.ProductionTurnBatch
	_ = json.Unmarshal(b, &batch)
	var ids []string
	for _, t := range batch.Turns {
		ids = append(ids, t.TurnID)
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.times = append(s.times, time.Now())
	n := len(s.batches)
	answer := s.answer
	s.mu.Unlock()
	if answer != nil {
		if status, body := answer(n, ids); status != 200 {
			if status == 429 {
				w.Header().Set("Retry-After", "3")
			}
			w.WriteHeader(status)
			io.WriteString(w, body)
			return
		}
	}
	fmt.Fprintf(w, `{"accepted":%d,"duplicates":0}`, len(ids))
}

func (s *turnsServer) seen() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.batches...)
}

func (s *turnsServer) client(t *testing.T) *flywheel.Client {
	c, err := flywheel.NewClient("http://gyre.test", "k", flywheel.WithHTTPClient(&http.Client{Transport: inMemory{s}}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func turn(id string) flywheel.ProductionTurn {
	in, out := "where is my order?", "on its way"
	return flywheel.ProductionTurn{TurnID: id, InputText: &in, FinalText: &out, ToolCalls: []flywheel.ToolCallRecord{}}
}

func TestAttach_OverflowDropsAndCountsWithoutBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		srv := &turnsServer{t: t, answer: func(n int, ids []string) (int, string) {
			if n == 1 {
				<-release // the server hangs on the first batch
			}
			return 200, ""
		}}
		c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot", QueueSize: 4, BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Add(turn("first")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the sender is stuck in POST /turns with "first"
		var dropped int
		for i := range 10 {
			// Add must return even though nothing is moving: if it blocked,
			// the bubble would deadlock and the test fail.
			_, err := c.Add(turn(fmt.Sprintf("t%d", i)))
			if errors.Is(err, flywheel.ErrQueueFull) {
				dropped++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if dropped != 6 {
			t.Errorf("dropped %d of 10 with a queue of 4, want 6", dropped)
		}
		st := c.Stats()
		if st.Dropped != 6 || st.Queued != 5 {
			t.Errorf("stats = %+v", st)
		}
		close(release)
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		st = c.Stats()
		if st.Accepted != 5 || st.Pending() != 0 {
			t.Errorf("after Close: %+v", st)
		}
		if _, err := c.Add(turn("late")); !errors.Is(err, flywheel.ErrCaptureClosed) {
			t.Errorf("Add after Close = %v", err)
		}
	})
}

func TestAttach_RetriesTemporaryFailuresWithTheSameTurnIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t, answer: func(n int, ids []string) (int, string) {
			switch n {
			case 1:
				return 503, `{"error":{"code":"unavailable","message":"restarting"}}`
			case 2:
				return 429, `{"error":{"code":"rate_limited","message":"slow down"}}`
			}
			return 200, ""
		}}
		c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot", FlushInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.Add(flywheel.ProductionTurn{InputText: new("q"), FinalText: new("a")}) // no id: one is minted
		if err != nil || id == "" {
			t.Fatalf("Add = %q, %v", id, err)
		}
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := srv.seen()
		if len(b) != 3 {
			t.Fatalf("%d attempts, want 3", len(b))
		}
		for i, ids := range b {
			if len(ids) != 1 || ids[0] != id {
				t.Errorf("attempt %d sent %v, want the same turn_id %s", i, ids, id)
			}
		}
		if gap := srv.times[2].Sub(srv.times[1]); gap < 3*time.Second {
			t.Errorf("retried %s after a 429 with Retry-After: 3", gap)
		}
		if st := c.Stats(); st.Accepted != 1 || st.Failed != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestAttach_CloseFlushesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t}
		c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot", FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 70 {
			if _, err := c.Add(turn(fmt.Sprintf("t%02d", i))); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if b := srv.seen(); len(b) != 1 || len(b[0]) != 64 {
			t.Fatalf("before Close: batches %v, want one full batch of 64", len(b))
		}
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := srv.seen()
		if len(b) != 2 || len(b[1]) != 6 {
			t.Fatalf("after Close: %d batches, want the 6 left flushed", len(b))
		}
		if st := c.Stats(); st.Accepted != 70 || st.Pending() != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestAttach_FlushesAfterTheInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t}
		c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot", FlushInterval: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		start := time.Now()
		c.Add(turn("a"))
		c.Add(turn("b"))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if b := srv.seen(); len(b) != 1 || len(b[0]) != 2 || srv.times[0].Sub(start) != 2*time.Second {
			t.Errorf("batches %v: want both turns sent 2 s after the first", b)
		}
	})
}

func TestAttach_InvalidTurnIsDroppedBeforeQueueing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t}
		c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot"})
		if err != nil {
			t.Fatal(err)
		}
		bad := turn("bad")
		bad.ToolCalls = []flywheel.ToolCallRecord{{Name: "t", Outcome: flywheel.OutcomeUnknown, StatusCode: new(200)}}
		_, err = c.Add(bad)
		var ve *flywheel.ValidationError
		if !errors.As(err, &ve) || ve.First().Pointer != "/tool_calls/0/status_code" {
			t.Errorf("Add = %v, want the contract violation", err)
		}
		c.Add(turn("good"))
		c.Close(context.Background())
		if b := srv.seen(); len(b) != 1 || len(b[0]) != 1 || b[0][0] != "good" {
			t.Errorf("sent %v, want only the good turn", b)
		}
		if st := c.Stats(); st.Invalid != 1 || st.Accepted != 1 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestAttach_SplitsARefusedBatchToIsolateTheBadTurn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pointer bool
	}{{"with a pointer", true}, {"without a pointer (bisect)", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &turnsServer{t: t, answer: func(n int, ids []string) (int, string) {
					for i, id := range ids {
						if id == "t5" {
							ptr := ""
							if tc.pointer {
								ptr = fmt.Sprintf(`,"pointer":"/turns/%d/final_text"`, i)
							}
							return 422, `{"error":{"code":"invalid_body","message":"bad"` + ptr + `}}`
						}
					}
					return 200, ""
				}}
				c, err := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot", FlushInterval: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				for i := range 12 {
					c.Add(turn(fmt.Sprintf("t%d", i)))
				}
				c.Close(context.Background())
				st := c.Stats()
				if st.Accepted != 11 || st.Rejected != 1 || st.Failed != 0 {
					t.Errorf("stats = %+v, want 11 accepted and the one bad turn rejected", st)
				}
				if tc.pointer && len(srv.seen()) != 3 {
					t.Errorf("%d requests, want 3: the batch, the bad turn alone, the rest", len(srv.seen()))
				}
			})
		})
	}
}

func TestAttach_GivesUpOnARefusedKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t, answer: func(int, []string) (int, string) {
			return 403, `{"error":{"code":"forbidden","message":"not your agent"}}`
		}}
		c, _ := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot"})
		c.Add(turn("a"))
		c.Close(context.Background())
		if st := c.Stats(); st.Failed != 1 || len(srv.seen()) != 1 {
			t.Errorf("stats = %+v after %d requests: a 403 is not retried", st, len(srv.seen()))
		}
	})
}

func TestAttach_CloseGivesUpWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &turnsServer{t: t, answer: func(int, []string) (int, string) { return 503, "" }}
		c, _ := flywheel.Attach(flywheel.AttachConfig{Client: srv.client(t), AgentID: "support-bot"})
		c.Add(turn("a"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v", err)
		}
		if st := c.Stats(); st.Failed != 1 || st.Pending() != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// TestAttach_AgainstGyre isolates a conflicting turn on a real server: the
// 409 turn_conflict points at it, the rest of the batch is stored.
func TestAttach_AgainstGyre(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	client, err := flywheel.NewClient(srv.URL, srv.Agent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PostTurns(context.Background(), flywheel.ProductionTurnBatch{AgentID: "support-bot", Turns: []flywheel.ProductionTurn{turn("taken")}}); err != nil {
		t.Fatal(err)
	}
	c, err := flywheel.Attach(flywheel.AttachConfig{Client: client, AgentID: "support-bot", FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	conflicting := turn("taken")
	conflicting.FinalText = new("a different answer under the same turn_id")
	for i := range 6 {
		if i == 3 {
			c.Add(conflicting)
		}
		c.Add(turn(fmt.Sprintf("turn-%d", i)))
	}
	c.Add(turn("taken")) // the same body again: a duplicate, not an error
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Accepted != 6 || st.Duplicates != 1 || st.Rejected != 1 || st.Pending() != 0 {
		t.Errorf("stats = %+v, want 6 accepted, 1 duplicate, the conflict rejected", st)
	}
	status, body := srv.Do(http.MethodGet, "/api/v1/turns?agent_id=support-bot", srv.Admin, nil)
	if status != 200 || strings.Count(string(body), `"turn_id"`) != 7 {
		t.Errorf("stored turns: %d %s", status, body)
	}
}
