package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
)

// seededExperiments is what seedExperiments made.
type seededExperiments struct {
	A, B string
	// BigRun is the case of B's run whose trajectory is 5 MB (repetition 1).
	BigRun string
}

// reps is the repetitions of each seeded case.
const reps = 5

// seedExperiments writes two finished experiments of runs/2 run records
// each (cases × 5 repetitions, every classification, each with a small
// ATIF trajectory; one run of B with a 5 MB one) through the store, as
// the evaluator's store recorder does.
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
	for x := range 2 {
		e, err := st.CreateExperiment(ctx, store.NewExperiment{TenantID: tenantID, Suite: "bench", SuiteVersion: "1",
			Harness: "http://harness.bench", Capabilities: json.RawMessage(`{"agent":"bench-harness","revision":"0123456789ab"}`),
			Config: json.RawMessage(fmt.Sprintf(`{"repetitions":%d,"case_threshold":1,"max_unscored_rate":0.2,"seed":7,"cases":%d}`, reps, cases))})
		if err != nil {
			return out, err
		}
		for c := range cases {
			for r := 1; r <= reps; r++ {
				class := [...]string{"passed", "passed", "failed", "unscored", "error", "passed"}[(c+r+x)%6]
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

// keptExperiments finds the two experiments seedExperiments made in a
// store kept from an earlier run: B is the newest, A the one before.
func keptExperiments(ctx context.Context, st store.Store, tenantID string) (seededExperiments, error) {
	xs, _, err := st.ListExperiments(ctx, tenantID, store.Page{Limit: 2})
	if err != nil {
		return seededExperiments{}, err
	}
	if len(xs) < 2 {
		return seededExperiments{}, fmt.Errorf("the kept store holds %d experiments, not the 2 seeded ones", len(xs))
	}
	return seededExperiments{A: xs[1].ID, B: xs[0].ID, BigRun: "case-00000"}, nil
}
