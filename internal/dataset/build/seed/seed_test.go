package seed_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// A seeded rollout reads back through the admin API as one the gateway,
// a worker and the grader made does: graded, its output, two counted
// completions whose bodies the calls route rebuilds into the conversation,
// an on-policy reconciliation, a passing verdict and training grade.
func TestSeededRolloutReadsBackThroughTheAPIAsARealOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	tn, err := st.CreateTenant(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	n, err := seed.Rollouts(ctx, st, blobs, tn.ID, 6)
	if err != nil || n != 6 {
		t.Fatalf("Rollouts = %d, %v; want 6", n, err)
	}
	rs, _, err := st.ListRollouts(ctx, tn.ID, store.RolloutFilter{}, store.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 {
		t.Fatalf("the store lists %d rollouts; want the 6 seeded", len(rs))
	}
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Store: st, Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, into any) {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), into); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	for _, r := range rs {
		var d struct {
			State          string          `json:"state"`
			AgentID        string          `json:"agent_id"`
			Output         json.RawMessage `json:"output"`
			Reconciliation *string         `json:"reconciliation"`
			TrainingGrade  *bool           `json:"training_grade"`
			Reasons        []string        `json:"not_training_grade_reasons"`
			Reward         *float64        `json:"reward"`
			Verdicts       []struct {
				Pass *bool `json:"pass"`
			} `json:"verdicts"`
			Gateway struct {
				Completions int `json:"completions"`
				Failed      int `json:"failed"`
				Calls       []struct {
					Seq       int      `json:"seq"`
					Counted   bool     `json:"counted"`
					LatencyMS *float64 `json:"latency_ms"`
				} `json:"calls"`
			} `json:"gateway"`
		}
		get("/api/v1/rollouts/"+r.ID, &d)
		if d.State != string(gyre.StateGraded) || d.AgentID != seed.Agent {
			t.Errorf("%s: state %q agent %q; want graded, %s", r.ID, d.State, d.AgentID, seed.Agent)
		}
		if !strings.Contains(string(d.Output), `"final_text":"Refund issued"`) {
			t.Errorf("%s: output %s", r.ID, d.Output)
		}
		if d.Reconciliation == nil || *d.Reconciliation != "on_policy" || d.TrainingGrade == nil || !*d.TrainingGrade ||
			d.Reasons == nil || len(d.Reasons) != 0 || d.Reward == nil || *d.Reward != 1 {
			t.Errorf("%s: reconciliation %v, training grade %v, reasons %v, reward %v; want on_policy, true, [], 1",
				r.ID, d.Reconciliation, d.TrainingGrade, d.Reasons, d.Reward)
		}
		if len(d.Verdicts) != 1 || d.Verdicts[0].Pass == nil || !*d.Verdicts[0].Pass {
			t.Errorf("%s: verdicts %+v; want one pass", r.ID, d.Verdicts)
		}
		if d.Gateway.Completions != 2 || d.Gateway.Failed != 0 || len(d.Gateway.Calls) != 2 {
			t.Fatalf("%s: gateway %+v; want 2 counted completions", r.ID, d.Gateway)
		}
		for i, c := range d.Gateway.Calls {
			if c.Seq != i+1 || !c.Counted || c.LatencyMS == nil {
				t.Errorf("%s: call %d is %+v; want seq %d, counted, timed", r.ID, i, c, i+1)
			}
		}
		var calls struct {
			Items []struct {
				Request struct {
					Messages []struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"messages"`
				} `json:"request"`
				Response struct {
					Choices []struct {
						Message struct {
							Content string `json:"content"`
						} `json:"message"`
					} `json:"choices"`
				} `json:"response"`
			} `json:"items"`
		}
		get("/api/v1/rollouts/"+r.ID+"/calls", &calls)
		if len(calls.Items) != 2 {
			t.Fatalf("%s: %d calls with bodies; want 2", r.ID, len(calls.Items))
		}
		last := calls.Items[1]
		var roles []string
		for _, m := range last.Request.Messages {
			roles = append(roles, m.Role)
		}
		if strings.Join(roles, ",") != "system,user,assistant,user" || last.Request.Messages[1].Content != "Refund order "+r.ID {
			t.Errorf("%s: second request's messages %+v; want system, this rollout's user turn, assistant, user", r.ID, last.Request.Messages)
		}
		if len(last.Response.Choices) != 1 || last.Response.Choices[0].Message.Content != "Refund issued for "+r.ID {
			t.Errorf("%s: second response %+v", r.ID, last.Response)
		}
	}
}
