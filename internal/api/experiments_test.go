package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/suite"
)

const experimentBody = `{"suite":"refunds","suite_version":"3","harness":"http://harness.test","capabilities":{"agent":"bot","revision":"abc"},"config":{"repetitions":1}}`

func TestExperimentsAPI(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, ev := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleEvaluator})
			_, rd := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleReader})
			_, ag := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleAgent})

			// Create: evaluators (and admins) only.
			e.json(http.MethodPost, "/api/v1/experiments", rd, experimentBody).wantError(t, 403, gyre.CodeForbidden, "")
			e.json(http.MethodPost, "/api/v1/experiments", ag, experimentBody).wantError(t, 403, gyre.CodeForbidden, "")
			e.json(http.MethodPost, "/api/v1/experiments", "", experimentBody).wantError(t, 401, gyre.CodeUnauthorized, "")
			resp := e.json(http.MethodPost, "/api/v1/experiments", ev, experimentBody)
			if resp.status != http.StatusCreated {
				t.Fatalf("create: %d %s", resp.status, resp.body)
			}
			var exp eval.ExperimentJSON
			decodeInto(t, resp, &exp)
			if _, err := uuid.Parse(exp.ID); err != nil || resp.header.Get("Location") != "/api/v1/experiments/"+exp.ID {
				t.Fatalf("created %+v, Location %q", exp, resp.header.Get("Location"))
			}
			if exp.Suite != "refunds" || exp.SuiteVersion != "3" || string(exp.Capabilities) != `{"agent":"bot","revision":"abc"}` || exp.Summary == nil || string(exp.Summary) != "null" || exp.FinishedAt != nil {
				t.Errorf("created experiment = %+v", exp)
			}
			for body, ptr := range map[string]string{
				`{"suite":"a b","suite_version":"1","harness":"h","capabilities":{}}`:          "/suite",
				`{"suite":"s","suite_version":"1","harness":"h","capabilities":[]}`:            "/capabilities",
				`{"suite":"s","suite_version":"1","harness":"","capabilities":{}}`:             "/harness",
				`{"suite":"s","suite_version":"1","harness":"h","capabilities":{},"key":"x"}`:  "/key",
				`{"suite":"s","suite_version":"1","harness":"h","capabilities":{},"config":1}`: "/config",
			} {
				e.json(http.MethodPost, "/api/v1/experiments", ev, body).wantError(t, 422, gyre.CodeInvalidBody, ptr)
			}

			// Blobs: content-addressed, idempotent, checked.
			traj := `{"schema_version":"ATIF-v1.7"}`
			sum := sha256Hex(traj)
			for i, want := range []int{http.StatusCreated, http.StatusOK} {
				r := e.do(http.MethodPut, "/api/v1/blobs/"+sum, ev, strings.NewReader(traj), "Content-Type", "application/octet-stream")
				if r.status != want {
					t.Fatalf("blob put %d: %d %s", i, r.status, r.body)
				}
			}
			e.do(http.MethodPut, "/api/v1/blobs/"+sha256Hex("other"), ev, strings.NewReader(traj), "Content-Type", "application/octet-stream").
				wantError(t, 422, gyre.CodeInvalidBody, "")
			e.do(http.MethodPut, "/api/v1/blobs/NOTASHA", ev, strings.NewReader(traj)).wantError(t, 400, gyre.CodeInvalidPathParam, "")
			e.do(http.MethodPut, "/api/v1/blobs/"+sum, rd, strings.NewReader(traj)).wantError(t, 403, gyre.CodeForbidden, "")
			if keys := e.blobKeys(); !containsKey(keys, "blobs/"+e.tenant.ID+"/"+sum) || len(keys) != 1 {
				t.Errorf("blob keys %v: want only blobs/<tenant>/<sha256> (a body under the wrong digest stores nothing)", keys)
			}
			// Trajectories may be far larger than the 4 MiB API body limit.
			big := strings.Repeat("x", 5<<20)
			if r := e.do(http.MethodPut, "/api/v1/blobs/"+sha256Hex(big), ev, strings.NewReader(big), "Content-Type", "application/octet-stream"); r.status != http.StatusCreated {
				t.Fatalf("5 MiB blob: %d %s", r.status, r.body)
			}

			// Runs: in flight, then finished, idempotently.
			runPath := "/api/v1/experiments/" + exp.ID + "/runs/case-a/1"
			inflight := `{"run_id":"run-1","case_id":"case-a","repetition":1,"status":"running"}`
			if r := e.json(http.MethodPut, runPath, ev, inflight); r.status != http.StatusCreated {
				t.Fatalf("put in-flight run: %d %s", r.status, r.body)
			}
			done := fmt.Sprintf(`{"run_id":"run-1","status":"completed","classification":"passed","model":"m1","answer":"ok",`+
				`"output":{"a":1},"verdicts":[{"grader":"contains","pass":true,"score":null,"reason":"ok"}],`+
				`"trajectory":{"valid":true,"errors":[],"schema_version":"ATIF-v1.7"},"trajectory_sha256":%q,"files":[],`+
				`"attempts":[{"attempt":1}],"usage":{"prompt_tokens":3},"score":1,"latency_ms":12.5,"started_at":"2030-01-01T00:00:00Z"}`, sum)
			for i, want := range []int{http.StatusOK, http.StatusOK} {
				r := e.json(http.MethodPut, runPath, ev, done)
				if r.status != want {
					t.Fatalf("put finished run %d: %d %s", i, r.status, r.body)
				}
				var run eval.RunJSON
				decodeInto(t, r, &run)
				if expStr(run.Classification) != "passed" || expStr(run.TrajectorySHA256) != sum || run.UpdatedAt == nil || string(run.Output) != `{"a":1}` {
					t.Errorf("stored run = %+v", run)
				}
			}
			unknown := fmt.Sprintf(`{"classification":"passed","trajectory_sha256":%q}`, sha256Hex("never uploaded"))
			e.json(http.MethodPut, "/api/v1/experiments/"+exp.ID+"/runs/case-b/1", ev, unknown).wantError(t, 422, gyre.CodeInvalidBody, "/trajectory_sha256")
			for body, ptr := range map[string]string{
				`{"case_id":"other"}`:                                  "/case_id",
				`{"repetition":2}`:                                     "/repetition",
				`{"classification":"skipped"}`:                         "/classification",
				`{"status":"done"}`:                                    "/status",
				`{"output":"text"}`:                                    "/output",
				`{"score":1.5}`:                                        "/score",
				`{"timed_out":true,"classification":"error"}`:          "/timed_out",
				`{"verdicts":{}}`:                                      "/verdicts",
				`{"updated_at":"2030-01-01T00:00:00Z"}`:                "/updated_at",
				`{"trajectory_sha256":"ABC"}`:                          "/trajectory_sha256",
				`{"classification":"passed","started_at":"yesterday"}`: "/started_at",
			} {
				e.json(http.MethodPut, runPath, ev, body).wantError(t, 422, gyre.CodeInvalidBody, ptr)
			}
			for _, p := range []string{"/runs/case-a/0", "/runs/case-a/01", "/runs/case-a/x", "/runs/a%20b/1"} {
				e.json(http.MethodPut, "/api/v1/experiments/"+exp.ID+p, ev, `{}`).wantError(t, 400, gyre.CodeInvalidPathParam, "")
			}
			e.json(http.MethodPut, runPath, rd, done).wantError(t, 403, gyre.CodeForbidden, "")

			// Reads: readers and evaluators.
			for _, key := range []string{rd, ev, e.admin} {
				r := e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID+"/runs", key, nil)
				var page struct {
					Items []eval.RunJSON `json:"items"`
				}
				decodeInto(t, r, &page)
				if r.status != 200 || len(page.Items) != 1 || page.Items[0].CaseID != "case-a" {
					t.Errorf("runs: %d %s", r.status, r.body)
				}
			}
			e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID, ag, nil).wantError(t, 403, gyre.CodeForbidden, "")

			// Finish.
			e.json(http.MethodPost, "/api/v1/experiments/"+exp.ID+"/finish", ev, `{"model":"m1"}`).wantError(t, 422, gyre.CodeInvalidBody, "/summary")
			r := e.json(http.MethodPost, "/api/v1/experiments/"+exp.ID+"/finish", ev, `{"model":"m1","summary":{"runs":1,"passed":1}}`)
			if r.status != 200 {
				t.Fatalf("finish: %d %s", r.status, r.body)
			}
			r = e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID, rd, nil)
			var got eval.ExperimentJSON
			decodeInto(t, r, &got)
			if expStr(got.Model) != "m1" || string(got.Summary) != `{"runs":1,"passed":1}` || got.FinishedAt == nil {
				t.Errorf("finished experiment = %+v", got)
			}
			r = e.do(http.MethodGet, "/api/v1/experiments?limit=10", rd, nil)
			if r.status != 200 || !strings.Contains(string(r.body), exp.ID) {
				t.Errorf("list: %d %s", r.status, r.body)
			}
			e.do(http.MethodGet, "/api/v1/experiments?limit=0", rd, nil).wantError(t, 400, gyre.CodeInvalidQuery, "")
			e.do(http.MethodGet, "/api/v1/experiments/not-a-uuid", rd, nil).wantError(t, 400, gyre.CodeInvalidPathParam, "")

			// Another tenant sees nothing.
			other, _ := e.newTenant("other")
			_, oev := e.newKey(other.ID, auth.KeyRequest{Role: gyre.RoleEvaluator})
			e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID, oev, nil).wantError(t, 404, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID+"/runs", oev, nil).wantError(t, 404, gyre.CodeNotFound, "")
			e.json(http.MethodPut, runPath, oev, inflight).wantError(t, 404, gyre.CodeNotFound, "")
			e.json(http.MethodPost, "/api/v1/experiments/"+exp.ID+"/finish", oev, `{"summary":{}}`).wantError(t, 404, gyre.CodeNotFound, "")
			// The other tenant's blob refs are its own: the same bytes are
			// not "uploaded" for it.
			e.json(http.MethodPut, "/api/v1/experiments/"+exp.ID+"/runs/case-a/1", oev, done).wantError(t, 404, gyre.CodeNotFound, "")
		})
	}
}

func containsKey(keys []string, want string) bool {
	for _, k := range keys {
		if k == want {
			return true
		}
	}
	return false
}

// TestRecordIntoServer runs an experiment with `--server` semantics: the
// eval runner records through the API with an evaluator key (SPEC §7.5).
func TestRecordIntoServer(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, ev := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleEvaluator})

			harness := http.NewServeMux()
			harness.HandleFunc("GET /capabilities", func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"agent":"bot","revision":"r1","provides":{"trajectory":true,"tool_calls":true}}`)
			})
			harness.HandleFunc("POST /runs", func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(r.Header.Get("Authorization"), ev) {
					t.Error("the gyre key reached the harness")
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"run_id":"r-`+uuid.NewString()+`"}`)
			})
			harness.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"status":"completed","answer":"Refund issued","model":"m1"}`)
			})
			harness.HandleFunc("GET /runs/{id}/trajectory", func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"schema_version":"ATIF-v1.7","session_id":"s","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"agent","message":"Refund issued"}]}`)
			})
			hs := httptest.NewServer(harness)
			defer hs.Close()

			dir := t.TempDir()
			p := filepath.Join(dir, "suite.yaml")
			os.WriteFile(p, []byte("name: refunds\nversion: \"1\"\ndefaults: {repetitions: 2}\ncases:\n  - id: small\n    input: {question: q}\n    graders: [{contains: Refund}]\n"), 0o644)
			s, err := suite.Load(p, suite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			client, err := eval.NewClient(hs.URL, "harness-secret", nil, eval.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := eval.NewRemoteRecorder(e.ts.URL, ev, e.ts.Client())
			if err != nil {
				t.Fatal(err)
			}
			runner, err := eval.NewRunner(eval.Config{Criteria: eval.DefaultCriteria()}, eval.Deps{Client: client, Recorder: rec})
			if err != nil {
				t.Fatal(err)
			}
			res, err := runner.Run(t.Context(), s)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != 0 || res.Report.Passed != 2 {
				t.Fatalf("result: exit %d %+v", res.ExitCode, res.Report.Summary)
			}
			r := e.do(http.MethodGet, "/api/v1/experiments/"+res.Experiment.ID, e.admin, nil)
			var got eval.ExperimentJSON
			decodeInto(t, r, &got)
			if expStr(got.Model) != "m1" || got.FinishedAt == nil || !strings.Contains(string(got.Capabilities), `"revision":"r1"`) {
				t.Errorf("experiment = %+v", got)
			}
			if strings.Contains(string(got.Config), "harness-secret") || strings.Contains(string(r.body), "harness-secret") {
				t.Error("the harness key was uploaded")
			}
			runs, err := rec.Runs(t.Context(), res.Experiment.ID)
			if err != nil || len(runs) != 2 {
				t.Fatalf("runs = %d, %v", len(runs), err)
			}
			for _, run := range runs {
				if run.Classification != "passed" || run.TrajectorySHA256 == "" {
					t.Errorf("run = %+v", run)
				}
				if ok, err := e.blobs.Exists(t.Context(), "blobs/"+e.tenant.ID+"/"+run.TrajectorySHA256); err != nil || !ok {
					t.Errorf("trajectory blob missing: %v", err)
				}
			}
			if !blobstore.ValidSHA256(runs[0].TrajectorySHA256) {
				t.Errorf("sha %q", runs[0].TrajectorySHA256)
			}
			var summary eval.Report
			if err := json.Unmarshal(got.Summary, &summary); err != nil || summary.Passed != 2 || summary.ExitCode != 0 {
				t.Errorf("summary = %s (%v)", got.Summary, err)
			}
		})
	}
}
