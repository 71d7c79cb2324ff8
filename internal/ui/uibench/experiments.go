package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/ui"
)

// seededExperiments is what seedExperiments made.
type seededExperiments struct {
	A, B string
	// Running is an experiment of as many runs that has not finished:
	// its page computes its report from its runs on every refresh.
	Running string
	// BigRun is the case of B's run whose trajectory is 5 MB (repetition 1).
	BigRun string
}

// reps is the repetitions of each seeded case.
const reps = 5

// seedExperiments writes two finished experiments of runs/2 run records
// each (cases × 5 repetitions, every classification, each with a small
// ATIF trajectory; one run of B with a 5 MB one) through the store, as
// the evaluator's store recorder does, then a third of as many runs that
// is still running: the last twentieth of its cases are in flight.
func seedExperiments(ctx context.Context, st store.Store, blobs *blobstore.Store, tenantID string, runs int) (seededExperiments, error) {
	var out seededExperiments
	small, err := putTrajectory(ctx, blobs, tenantID, trajectory(8))
	if err != nil {
		return out, err
	}
	big, err := putTrajectory(ctx, blobs, tenantID, trajectory(2200))
	if err != nil {
		return out, err
	}
	cases := max(runs/2/reps, 1)
	rec := &eval.StoreRecorder{Store: st, Tenant: tenantID}
	for x := range 3 {
		e, err := st.CreateExperiment(ctx, store.NewExperiment{TenantID: tenantID, Suite: "bench", SuiteVersion: "1",
			Harness: "http://harness.bench", Capabilities: json.RawMessage(`{"agent":"bench-harness","revision":"0123456789ab"}`),
			Config: json.RawMessage(fmt.Sprintf(`{"repetitions":%d,"case_threshold":1,"max_unscored_rate":0.2,"seed":7,"cases":%d}`, reps, cases))})
		if err != nil {
			return out, err
		}
		for c := range cases {
			for r := 1; r <= reps; r++ {
				class := [...]string{"passed", "passed", "failed", "unscored", "error", "passed"}[(c+r+x)%6]
				if x == 2 && c >= cases-cases/20 {
					class = "" // in flight
				}
				pass := "true"
				switch class {
				case "failed":
					pass = "false"
				case "unscored", "error":
					pass = "null"
				}
				traj := small
				if x == 1 && c == 0 && r == 1 {
					traj = big
				}
				lat := float64(100 + c%50)
				score := 1.0
				if class != "passed" {
					score = 0
				}
				answer := "answer"
				if err := rec.PutRun(ctx, store.RunRecord{ExperimentID: e.ID, CaseID: fmt.Sprintf("case-%05d", c), Repetition: r,
					RunID: fmt.Sprintf("run-%d-%d-%d", x, c, r), Status: "completed", Classification: class, Model: "bench-model",
					Answer: &answer, Verdicts: json.RawMessage(`[{"grader":"contains","pass":` + pass + `,"score":null,"reason":"bench"}]`),
					TrajectorySHA256: traj.SHA256, Trajectory: json.RawMessage(`{"valid":true,"errors":[],"schema_version":"ATIF-v1.6"}`),
					Usage: json.RawMessage(`{"prompt_tokens":100,"completion_tokens":20,"cost_usd":0.001}`), Score: &score, LatencyMS: &lat,
					Blobs: []store.BlobRef{traj}}); err != nil {
					return out, err
				}
			}
		}
		if x == 2 {
			out.Running = e.ID
			break
		}
		e, err = st.Experiment(ctx, tenantID, e.ID)
		if err != nil {
			return out, err
		}
		rep, err := eval.ReportFrom(ctx, rec, e)
		if err != nil {
			return out, err
		}
		summary, err := json.Marshal(rep)
		if err != nil {
			return out, err
		}
		if err := rec.Finish(ctx, e.ID, "bench-model", summary); err != nil {
			return out, err
		}
		if x == 0 {
			out.A = e.ID
		} else {
			out.B = e.ID
		}
	}
	out.BigRun = "case-00000"
	return out, nil
}

func putTrajectory(ctx context.Context, blobs *blobstore.Store, tenantID string, doc []byte) (store.BlobRef, error) {
	sha, size, err := blobs.PutContent(ctx, eval.BlobPrefix(tenantID), bytes.NewReader(doc))
	return store.BlobRef{SHA256: sha, Size: size}, err
}

// trajectory is a valid ATIF document of n steps, user and agent in
// turn, each agent step with a tool call, its observation and metrics
// (2,200 steps make about 5 MB).
func trajectory(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"schema_version":"ATIF-v1.6","session_id":"bench","agent":{"name":"bench","version":"1"},"steps":[`)
	filler := strings.Repeat("The quick brown fox inspects the refund ledger. ", 45)
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(",")
		}
		ts := fmt.Sprintf("2026-01-01T%02d:%02d:%02dZ", (i/3600)%24, (i/60)%60, i%60)
		if i%2 == 1 {
			fmt.Fprintf(&b, `{"step_id":%d,"timestamp":%q,"source":"user","message":%q}`, i, ts, filler)
			continue
		}
		fmt.Fprintf(&b, `{"step_id":%d,"timestamp":%q,"source":"agent","message":"ok","tool_calls":[{"tool_call_id":"c%d","function_name":"lookup","arguments":{"n":%d}}],`+
			`"observation":{"results":[{"source_call_id":"c%d","content":%q}]},"metrics":{"prompt_tokens":100,"completion_tokens":10}}`, i, ts, i, i, i, filler)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// seedTurns stores n production turns of one agent, ten to a
// conversation, through the store (as POST /turns does).
func seedTurns(ctx context.Context, st store.Store, tenantID string, n int) error {
	for start := 0; start < n; start += store.MaxTurnsPerBatch {
		var batch []store.NewTurn
		for i := start; i < min(n, start+store.MaxTurnsPerBatch); i++ {
			id := fmt.Sprintf("turn-%06d", i)
			conv := fmt.Sprintf("conv-%d", i/10)
			body := fmt.Sprintf(`{"turn_id":%q,"conversation_id":%q,"turn_index":%d,"input_text":"Where is order %d?","final_text":"It shipped.","tool_calls":[{"name":"lookup","outcome":"ok","status_code":200}],"tool_calls_omitted_count":0}`, id, conv, i%10, i)
			batch = append(batch, store.NewTurn{TurnID: id, ConversationID: conv, Body: []byte(body), SHA256: fmt.Sprintf("%064x", i)})
		}
		if _, err := st.InsertTurns(ctx, tenantID, "bench-bot", batch); err != nil {
			return err
		}
	}
	return nil
}

// keptExperiments finds the experiments seedExperiments made in a store
// kept from an earlier run: the running one, B the newest finished one,
// A the one before.
func keptExperiments(ctx context.Context, st store.Store, tenantID string) (seededExperiments, error) {
	xs, _, err := st.ListExperiments(ctx, tenantID, store.Page{Limit: 3})
	if err != nil {
		return seededExperiments{}, err
	}
	out := seededExperiments{BigRun: "case-00000"}
	for _, e := range xs {
		switch {
		case e.FinishedAt == nil && out.Running == "":
			out.Running = e.ID
		case e.FinishedAt != nil && out.B == "":
			out.B = e.ID
		case e.FinishedAt != nil && out.A == "":
			out.A = e.ID
		}
	}
	if out.A == "" || out.B == "" || out.Running == "" {
		return out, fmt.Errorf("the kept store does not hold the 3 seeded experiments (2 finished, 1 running): seed it again")
	}
	return out, nil
}

// experimentPages are the evaluation pages measured: the lists, the
// finished and the running experiment with their live fragments, the
// comparison and the runs (the 5 MB trajectory among them).
func experimentPages(exps seededExperiments) []string {
	return []string{
		"/ui/experiments",
		"/ui/experiments?suite=bench&state=finished",
		"/ui/experiments/" + exps.B,
		"/ui/experiments/" + exps.B + "/live",
		"/ui/experiments/" + exps.Running,
		"/ui/experiments/" + exps.Running + "/live",
		"/ui/compare?a=" + exps.A + "&b=" + exps.B,
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/1",
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/1/steps?from=1000",
		"/ui/experiments/" + exps.B + "/runs/" + exps.BigRun + "/2",
	}
}

// firstViewPages are pages whose first view computes what later views
// reuse: they are measured again each on a fresh UI, as after a restart.
func firstViewPages(exps seededExperiments) []string {
	return []string{
		"/ui/compare?a=" + exps.A + "&b=" + exps.B,
		"/ui/compare?a=" + exps.A + "&b=" + exps.Running,
		"/ui/experiments/" + exps.Running,
	}
}

// measureFirstViews asks for each of firstViewPages requests times, each
// from a fresh UI (made before the clock starts), and writes their server
// times to w: nothing an earlier view computed is reused.
func measureFirstViews(w io.Writer, st store.Store, blobs *blobstore.Store, cookies []*http.Cookie, exps seededExperiments, requests int) error {
	fmt.Fprintln(w, "first views (a fresh UI each time):")
	for _, p := range firstViewPages(exps) {
		var ds []time.Duration
		var cpu time.Duration
		for range requests {
			web, err := ui.New(ui.Config{}, ui.Deps{Store: st, Blobs: blobs})
			if err != nil {
				return err
			}
			req := httptest.NewRequest("GET", p, nil)
			for _, c := range cookies {
				req.AddCookie(c)
			}
			rec := httptest.NewRecorder()
			cpu0, t0 := cpuTime(), time.Now()
			web.ServeHTTP(rec, req)
			ds = append(ds, time.Since(t0))
			cpu += cpuTime() - cpu0
			if rec.Code != http.StatusOK {
				return fmt.Errorf("%s: status %d: %s", p, rec.Code, rec.Body.String())
			}
		}
		slices.Sort(ds)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		name := p
		if len(name) > 60 {
			name = name[:57] + "..."
		}
		fmt.Fprintf(w, "%-60s %10.1f %10.1f %10.1f %10.1f\n", name, ms(ds[len(ds)/2]), ms(ds[len(ds)*95/100]), ms(ds[len(ds)-1]),
			ms(cpu/time.Duration(requests)))
	}
	return nil
}
