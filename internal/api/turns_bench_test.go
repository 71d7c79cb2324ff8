package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// turnsBenchSenders is how many clients send batches at once.
const turnsBenchSenders = 8

// BenchmarkTurnsIntake measures POST /turns end to end: 64-turn batches of
// realistic turns (three tool calls each, ~1.1 KB per turn) sent by
// turnsBenchSenders concurrent clients over a loopback HTTP connection, each
// batch schema-validated, canonicalized, hashed and committed before its
// 200. It reports turns/s and the process's CPU time per turn (clients
// included); ns/op is per batch. PostgreSQL runs when
// GYRE_TEST_POSTGRES_URL is set.
func BenchmarkTurnsIntake(b *testing.B) {
	for _, eng := range engines() {
		b.Run(eng.name, func(b *testing.B) { benchTurnsIntake(b, eng) })
	}
}

func benchTurnsIntake(b *testing.B, eng engine) {
	st := eng.open(b, clock.Real{})
	srv, err := New(Config{}, Deps{Store: st, Logger: telemetry.Discard(), Clock: clock.Real{}, Metrics: telemetry.NewMetrics()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tn, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{turnsBenchAgent}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: turnsBenchSenders, MaxConnsPerHost: turnsBenchSenders}}
	b.Cleanup(client.CloseIdleConnections)

	tmpl := newTurnsBenchBatch()
	var run atomic.Int64 // distinct turn ids across the runs of b.N
	post := func(n int64) error {
		body := tmpl.body(n)
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/turns", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var a turnsAnswer
		if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &a) != nil || a.Accepted != turnsBenchTurns {
			return fmt.Errorf("POST /turns = %d %s", resp.StatusCode, out)
		}
		return nil
	}
	if err := post(run.Add(1) << 32); err != nil { // warm up: connection, statements
		b.Fatal(err)
	}
	b.SetBytes(int64(len(tmpl.body(0))))
	b.ResetTimer()

	base := run.Add(1) << 32
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	cpu0, haveCPU := turnsProcessCPU()
	start := time.Now()
	for range turnsBenchSenders {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := post(base + i); err != nil {
					errOnce.Do(func() { failed = err })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := turnsProcessCPU()
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(b.N*turnsBenchTurns)/elapsed.Seconds(), "turns/s")
	if haveCPU {
		// Server and clients together (they share the process): what a
		// turn costs, whatever else ran on the machine meanwhile.
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N*turnsBenchTurns), "cpu-µs/turn")
	}
}

const (
	turnsBenchAgent = "support-bot.eu-west"
	turnsBenchTurns = 64
)

// turnsBenchBatch is a 64-turn ProductionTurnBatch split around each turn's
// batch number, so that every batch has turn ids of its own.
type turnsBenchBatch struct{ parts []string }

func newTurnsBenchBatch() turnsBenchBatch {
	const mark = "\x00"
	var b strings.Builder
	b.WriteString(`{"agent_id":"` + turnsBenchAgent + `","turns":[`)
	for i := range turnsBenchTurns {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"turn_id":"turn-%s-%02d","task_id":"ticket/%d","conversation_id":"conv-%d","turn_index":%d,`+
			`"input_text":"Hi, my order #%d still has not arrived — can you check where it is?",`+
			`"final_text":"Your order #%d left the warehouse yesterday and should arrive by Friday.",`+
			`"tool_calls":[`+
			`{"name":"lookup_order","arguments":{"order_id":%d,"include":["shipments","items"]},"outcome":"ok","status_code":200,"output":{"status":"shipped","carrier":"DHL","eta":"2025-02-07"},"latency_ms":41.5,"agent_name":"orders","tool_call_id":"call_%da","entity_ids":{"id":"ord_%d"}},`+
			`{"name":"track_shipment","arguments":{"carrier":"DHL","tracking":"JD0146000033%d"},"outcome":"unknown","status_code":null,"output":"in transit","error":null,"latency_ms":120,"tool_call_id":"call_%db"},`+
			`{"name":"add_note","arguments":{"ticket":"T-%d","text":"customer informed"},"outcome":"failed","status_code":409,"error":"note already exists","error_class":"Conflict","latency_ms":12.25,"agent_name":null,"tool_call_id":null,"entity_ids":{}}`+
			`],"tool_calls_omitted_count":0,"agent_fingerprint":{"sdk":"gyre-go/0.1.0","skills":["orders","shipping"]},"occurred_at":"2025-01-31T12:%02d:00Z"}`,
			mark, i, i, i%7, i, 1000+i, 1000+i, 1000+i, i, 1000+i, i, i, i, i%60)
	}
	b.WriteString(`]}`)
	return turnsBenchBatch{parts: strings.Split(b.String(), mark)}
}

// body returns the batch whose turn ids carry n.
func (t turnsBenchBatch) body(n int64) []byte {
	id := strconv.FormatInt(n, 36)
	out := make([]byte, 0, len(t.parts[0])*turnsBenchTurns+len(t.parts)*len(id))
	for i, p := range t.parts {
		if i > 0 {
			out = append(out, id...)
		}
		out = append(out, p...)
	}
	return out
}
