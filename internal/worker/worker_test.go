//go:build unix

package worker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/worker"
	"github.com/gyrehq/gyre/internal/worker/workertest"
)

// waitFor is how long a test waits for something that should happen
// within a second or two; it bounds a hang, it times nothing.
const waitFor = 60 * time.Second

// run is a worker under test: flywheel.Serve with a worker.Runner, against
// a real server.
type run struct {
	t       *testing.T
	cancel  context.CancelFunc
	done    chan error
	outputs atomic.Int64 // POST …/output requests sent
	mu      sync.Mutex
	claimed map[string]flywheel.RolloutRequest
}

type runOpts struct {
	argv        []string
	env         worker.EnvSpec
	lookup      func(string) (string, bool)
	concurrency int
	lease       time.Duration
	drain       time.Duration
	killGrace   time.Duration
}

// startWorker runs a worker for agent-1 until the test ends or stop.
func startWorker(t *testing.T, srv *workertest.Server, o runOpts) *run {
	t.Helper()
	r := &run{t: t, done: make(chan error, 1), claimed: map[string]flywheel.RolloutRequest{}}
	if o.lookup == nil {
		o.lookup = mapEnv(map[string]string{"PATH": os.Getenv("PATH")})
	}
	if o.killGrace == 0 {
		o.killGrace = 500 * time.Millisecond
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runner, err := worker.NewRunner(worker.Config{Argv: o.argv, Env: o.env, LookupEnv: o.lookup, KillGrace: o.killGrace, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: roundTrip(func(req *http.Request) (*http.Response, error) {
		if strings.HasSuffix(req.URL.Path, "/output") {
			r.outputs.Add(1)
		}
		return http.DefaultTransport.RoundTrip(req)
	})}
	client, err := flywheel.NewClient(srv.URL, srv.Agent, flywheel.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	h := flywheel.HandlerFunc(func(ctx context.Context, ro *flywheel.Rollout) (flywheel.RolloutOutput, error) {
		r.mu.Lock()
		r.claimed[ro.Request.RolloutID] = ro.Request
		r.mu.Unlock()
		return runner.HandleRollout(ctx, ro)
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- flywheel.Serve(ctx, flywheel.ServeConfig{
			Client: client, AgentID: "agent-1", Concurrency: max(o.concurrency, 1), Lease: o.lease,
			Root: t.TempDir(), Drain: o.drain, PollWait: time.Second, Logger: log,
		}, h)
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop starts the graceful stop and waits for Serve to return.
func (r *run) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(waitFor):
		r.t.Fatal("the worker did not stop")
		return nil
	}
}

func (r *run) request(id string) flywheel.RolloutRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.claimed[id]
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func hasOutput(r workertest.Rollout) bool { return len(r.Output) > 0 && string(r.Output) != "null" }

// events returns the output's events of the given type.
func events(out map[string]any, typ string) []map[string]any {
	var res []map[string]any
	evs, _ := out["events"].([]any)
	for _, e := range evs {
		if m, ok := e.(map[string]any); ok && m["type"] == typ {
			res = append(res, m)
		}
	}
	return res
}

func TestWorker_SuccessWithReport(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "where is order A1?"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "report")})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)

	if r.State != "submitted" && r.State != "graded" {
		t.Fatalf("state = %s", r.State)
	}
	if r.WorkerID == nil || *r.WorkerID == "" {
		t.Errorf("the claim carried no worker_id")
	}
	out := r.OutputMap()
	if got, want := out["final_text"], "answer: where is order A1? (stdin matches: true)"; got != want {
		t.Errorf("final_text = %q, want %q (the report's, not stdout)", got, want)
	}
	if out["llm_call_count"] != float64(2) || out["success"] != true || out["exclusion"] != nil {
		t.Errorf("report fields lost: llm_call_count=%v success=%v exclusion=%v", out["llm_call_count"], out["success"], out["exclusion"])
	}
	calls, _ := out["tool_calls"].([]any)
	if len(calls) != 2 {
		t.Fatalf("tool_calls = %v, want the report's two calls", out["tool_calls"])
	}
	ok := calls[0].(map[string]any)
	if ok["outcome"] != "ok" || ok["status_code"] != float64(200) || ok["tool_call_id"] != "call_1" {
		t.Errorf("observed call = %v", ok)
	}
	if ids, _ := ok["entity_ids"].(map[string]any); len(ids) != 1 || ids["id"] != "A1" {
		t.Errorf("entity_ids = %v, want only the contract's keys", ok["entity_ids"])
	}
	unk := calls[1].(map[string]any)
	if unk["outcome"] != "unknown" || unk["status_code"] != nil {
		t.Errorf("unknown call = %v: status_code must be null", unk)
	}
	if o, _ := unk["output"].(map[string]any); o["ok"] != nil || o["status"] != nil || o["note"] != "request sent" {
		t.Errorf("unknown call's output = %v: status keys must be scrubbed, the rest kept", unk["output"])
	}
	arts, _ := out["artifacts"].(map[string]any)
	if a, _ := arts["answer.txt"].(map[string]any); a["content"] != "answer for where is order A1?" {
		t.Errorf("artifacts = %v, want answer.txt inlined", arts)
	}
	if ev := events(out, "stderr"); len(ev) != 1 || !strings.Contains(ev[0]["tail"].(string), "a line on stderr") {
		t.Errorf("stderr event = %v", ev)
	}
	if ev := events(out, "exit"); len(ev) != 1 || ev[0]["exit_code"] != float64(0) {
		t.Errorf("exit event = %v", ev)
	}
	timing, _ := out["timing"].(map[string]any)
	for _, k := range []string{"claimed_ts", "started_ts", "ended_ts", "duration_ms"} {
		if _, ok := timing[k]; !ok {
			t.Errorf("timing lacks %s: %v", k, timing)
		}
	}
}

func TestWorker_StdoutOnlyIsNotReported(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "stdout")})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)
	out := r.OutputMap()
	if out["final_text"] != "plain answer from stdout" {
		t.Errorf("final_text = %q, want stdout trimmed", out["final_text"])
	}
	if v, ok := out["tool_calls"]; !ok || v != nil {
		t.Errorf("tool_calls = %v (present %t), want null: an agent without a report reported nothing", v, ok)
	}
	if _, ok := out["llm_call_count"]; ok {
		t.Errorf("llm_call_count = %v: the worker never fills it", out["llm_call_count"])
	}
	if out["exclusion"] != nil {
		t.Errorf("exclusion = %v", out["exclusion"])
	}
}

func TestWorker_ExitNonzero(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"}, workertest.Case{Question: "q2"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "exit", "1")})
	for _, id := range ids {
		r := srv.WaitRollout(id, waitFor, hasOutput)
		if r.ExclusionReason() != "agent_exit_nonzero" {
			t.Fatalf("exclusion = %s, want agent_exit_nonzero", r.Exclusion)
		}
		out := r.OutputMap()
		if out["final_text"] != "partial answer" || out["tool_calls"] != nil {
			t.Errorf("final_text = %q tool_calls = %v", out["final_text"], out["tool_calls"])
		}
		ev := events(out, "stderr")
		if len(ev) != 1 {
			t.Fatalf("stderr events = %v", ev)
		}
		tail := ev[0]["tail"].(string)
		if len(tail) != worker.StderrTail || !strings.HasSuffix(tail, "boom: the agent failed\n") || ev[0]["truncated"] != true {
			t.Errorf("stderr tail has %d bytes, truncated=%v, ends %q; want the last 16 KiB", len(tail), ev[0]["truncated"], tail[max(0, len(tail)-40):])
		}
	}
}

func TestWorker_ReportExclusionWinsOnNonzeroExit(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "exit-report")})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)
	if r.ExclusionReason() != "credential_expired" {
		t.Fatalf("exclusion = %s, want the report's credential_expired", r.Exclusion)
	}
	if got := r.OutputMap()["final_text"]; got != "gave up" {
		t.Errorf("final_text = %q", got)
	}
}

func TestWorker_MissingBinaryIsEntrypointError(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	startWorker(t, srv, runOpts{argv: []string{filepath.Join(t.TempDir(), "no-such-agent")}})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)
	if r.ExclusionReason() != "entrypoint_error" {
		t.Fatalf("exclusion = %s, want entrypoint_error", r.Exclusion)
	}
	if out := r.OutputMap(); out["tool_calls"] != nil {
		t.Errorf("tool_calls = %v", out["tool_calls"])
	}
}

func TestWorker_MalformedReportIsIgnored(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "bad-report")})
	out := srv.WaitRollout(ids[0], waitFor, hasOutput).OutputMap()
	if out["final_text"] != "stdout answer" || out["tool_calls"] != nil {
		t.Errorf("final_text = %q tool_calls = %v: an invalid report is ignored as a whole", out["final_text"], out["tool_calls"])
	}
	ev := events(out, "report_ignored")
	if len(ev) != 1 {
		t.Fatalf("events = %v, want one report_ignored", out["events"])
	}
	reason := ev[0]["reason"].(map[string]any)
	if reason["pointer"] != "/tool_calls/0/status_code" {
		t.Errorf("report_ignored = %v, want the pointer of the fault", reason)
	}
}

// pids reads "pid [pid…]" from a file the agent wrote.
func waitPids(t *testing.T, path string) []int {
	t.Helper()
	end := time.Now().Add(waitFor)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			var out []int
			for _, f := range strings.Fields(string(b)) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, n)
			}
			return out
		}
		if time.Now().After(end) {
			t.Fatalf("the agent never wrote %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil && !isLinux()
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func isLinux() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

func TestWorker_DeadlineKillsTheGroup(t *testing.T) {
	t.Parallel()
	// The server's clock runs an hour ahead: the worker must take its
	// deadline from deadline_ts corrected by the Date header, not raw.
	srv := workertest.Start(t, workertest.Options{Skew: time.Hour})
	// 6 s leave a slow, loaded machine time to start the agent and its
	// grandchild before the deadline.
	_, ids := srv.Batch(workertest.BatchOptions{DeadlineS: 6}, workertest.Case{Question: "q"})
	pidFile := filepath.Join(t.TempDir(), "pids")
	startWorker(t, srv, runOpts{argv: agentCmd(t, "hang", pidFile), killGrace: 300 * time.Millisecond})
	pids := waitPids(t, pidFile)
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)

	if r.ExclusionReason() != "deadline_exceeded" {
		t.Fatalf("exclusion = %s, want deadline_exceeded", r.Exclusion)
	}
	out := r.OutputMap()
	if out["final_text"] != "partial answer before the deadline" || out["llm_call_count"] != float64(1) {
		t.Errorf("the report written before the kill was not used: %v", out)
	}
	if calls, ok := out["tool_calls"].([]any); !ok || len(calls) != 0 {
		t.Errorf("tool_calls = %v, want the report's []", out["tool_calls"])
	}
	if ev := events(out, "exit"); len(ev) != 1 || ev[0]["sigkill"] != true || ev[0]["signal"] != "killed" {
		t.Errorf("exit event = %v, want SIGKILL after the ignored SIGTERM", ev)
	}
	// The agent was reaped (no zombie) and its grandchild died with the
	// group.
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[0])); isLinux() && err == nil {
		t.Errorf("agent %d still has a process entry: not reaped", pids[0])
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d outlived its rollout", pid)
		}
	}
}

func TestWorker_Artifacts(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "artifacts")})
	out := srv.WaitRollout(ids[0], waitFor, hasOutput).OutputMap()
	arts, _ := out["artifacts"].(map[string]any)

	digest := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	inline := func(s string) any {
		return map[string]any{"sha256": digest([]byte(s)), "size_bytes": float64(len(s)), "content": s}
	}
	want := map[string]any{
		unicodeName:           inline(unicodeContent),
		"data/blob.bin":       digest(binaryContent),
		"data/deeper/note.md": inline("# note\n"),
		"large.txt":           digest([]byte(largeContent)),
		"empty.txt":           inline(""),
		"huge.sparse":         "skipped:too_large:" + strconv.FormatInt(sparseSize, 10),
		"escape":              "skipped:symlink",
		"inside-link":         "skipped:symlink",
		"dirlink":             "skipped:symlink",
		"fifo":                "skipped:not_regular",
	}
	gotJSON, _ := json.Marshal(arts)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("artifacts =\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	if strings.Contains(string(gotJSON), "root:") {
		t.Errorf("the symlink to /etc/passwd was followed")
	}
}

func TestWorker_LeaseLostKillsTheChildAndReportsNothing(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	w := startWorker(t, srv, runOpts{argv: agentCmd(t, "wait-term", pidFile, marker), lease: 5 * time.Second})
	pid := waitPids(t, pidFile)[0]

	// The lease lapses on the server's clock: the next heartbeat answers
	// 409 lease_lost.
	srv.Clock.Advance(10 * time.Minute)
	end := time.Now().Add(waitFor)
	for running(pid) {
		if time.Now().After(end) {
			t.Fatal("the agent was not stopped after the lease was lost")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the agent did not get SIGTERM: %v", err)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	if n := w.outputs.Load(); n != 0 {
		t.Errorf("the worker sent %d outputs after losing the lease, want none", n)
	}
	if r := srv.Rollout(ids[0]); hasOutput(r) {
		t.Errorf("output = %s, want none", r.Output)
	}
}

func TestWorker_DrainStopsAndReportsCancelled(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	w := startWorker(t, srv, runOpts{argv: agentCmd(t, "wait-term", pidFile, marker), drain: 200 * time.Millisecond})
	waitPids(t, pidFile)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	r := srv.Rollout(ids[0])
	if r.ExclusionReason() != "cancelled" {
		t.Fatalf("exclusion = %s, want cancelled; rollout %s", r.Exclusion, r.Raw)
	}
	if got := r.OutputMap()["final_text"]; got != "stopped early" {
		t.Errorf("final_text = %q", got)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the agent did not get SIGTERM: %v", err)
	}
}

func TestWorker_ChildEnvironment(t *testing.T) {
	// Not parallel: it checks that the process environment does not change.
	before := os.Environ()
	slices.Sort(before)

	srv := workertest.Start(t, workertest.Options{})
	big := strings.Repeat("é", 40<<10) // 80 KiB: over the GYRE_TURN_INPUT limit
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "first"}, workertest.Case{Question: big})
	dumps := t.TempDir()
	workerEnv := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": "/home/agent", "LANG": "C.UTF-8", "TZ": "UTC",
		"GYRE_KEY": "the-workers-own-key", "GYRE_SERVER": "http://x", "OPENAI_API_KEY": "the-workers-openai-key",
		"OPENAI_BASE_URL": "https://api.openai.com/v1", "ANTHROPIC_API_KEY": "sk-ant", "AZURE_OPENAI_KEY": "az",
		"AWS_SECRET_ACCESS_KEY": "aws", "CUSTOM_SETTING": "passed", "UNNAMED": "not passed",
	}
	spec := worker.EnvSpec{Pass: []string{"CUSTOM_SETTING", "ANTHROPIC_API_KEY", "AZURE_OPENAI_KEY"}, Set: map[string]string{"AGENT_MODEL": "gpt-test"}}
	w := startWorker(t, srv, runOpts{argv: agentCmd(t, "env", dumps), env: spec, lookup: mapEnv(workerEnv), concurrency: 2})
	for _, id := range ids {
		srv.WaitRollout(id, waitFor, hasOutput)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}

	for i, id := range ids {
		req := w.request(id)
		b, err := os.ReadFile(filepath.Join(dumps, id+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var dump struct {
			Env   []string `json:"env"`
			Stdin string   `json:"stdin"`
		}
		if err := json.Unmarshal(b, &dump); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range dump.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		input := []string{"first", big}[i]
		want := map[string]string{
			"PATH": os.Getenv("PATH"), "HOME": "/home/agent", "LANG": "C.UTF-8", "TZ": "UTC",
			"CUSTOM_SETTING": "passed", "AZURE_OPENAI_KEY": "az", "AGENT_MODEL": "gpt-test",
			"OPENAI_BASE_URL": req.LLMURL, "OPENAI_API_BASE": req.LLMURL, "OPENAI_API_KEY": req.APIKey,
			// gyre's own Anthropic variables win over the worker's, even named.
			"ANTHROPIC_BASE_URL": strings.TrimSuffix(req.LLMURL, "/v1"), "ANTHROPIC_API_KEY": req.APIKey,
			"GYRE_ROLLOUT_ID": id, "GYRE_DEADLINE_TS": strconv.FormatFloat(req.DeadlineTS, 'f', -1, 64),
			"GYRE_TURN_INPUT_FILE": env["GYRE_TURN_INPUT_FILE"], "GYRE_ARTIFACTS_DIR": env["GYRE_ARTIFACTS_DIR"],
			"GYRE_REPORT": env["GYRE_REPORT"],
		}
		if i == 0 {
			want["GYRE_TURN_INPUT"] = input
		}
		if req.APIKey == "" || !strings.Contains(req.LLMURL, "/gw/") {
			t.Fatalf("rollout %s was not claimed through the handler", id)
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("rollout %d: %s = %q, want %q", i, k, env[k], v)
			}
		}
		for k := range env {
			if _, ok := want[k]; !ok {
				t.Errorf("rollout %d: the child got %s, which is not on the allow-list", i, k)
			}
		}
		if dump.Stdin != input {
			t.Errorf("rollout %d: stdin had %d bytes, want the turn input (%d)", i, len(dump.Stdin), len(input))
		}
		if got, err := os.ReadFile(env["GYRE_TURN_INPUT_FILE"]); err == nil || !os.IsNotExist(err) {
			// The private dir is removed after the rollout.
			t.Errorf("turn input file still exists after the rollout (%d bytes, %v)", len(got), err)
		}
		art := env["GYRE_ARTIFACTS_DIR"]
		if !filepath.IsAbs(art) || strings.HasPrefix(env["GYRE_TURN_INPUT_FILE"], art) || strings.HasPrefix(env["GYRE_REPORT"], art) {
			t.Errorf("artifacts dir %q must be absolute and hold neither the input %q nor the report %q",
				art, env["GYRE_TURN_INPUT_FILE"], env["GYRE_REPORT"])
		}
		if fi, err := os.Stat(art); err != nil || !fi.IsDir() {
			t.Errorf("artifacts dir %q was not created: %v", art, err)
		}
	}
	if w.request(ids[0]).APIKey == w.request(ids[1]).APIKey {
		t.Errorf("two rollouts share an api_key")
	}

	after := os.Environ()
	slices.Sort(after)
	if !slices.Equal(before, after) {
		t.Errorf("the worker changed its own environment")
	}
}

func TestWorker_LargeInputAndAChildThatNeverReadsStdin(t *testing.T) {
	t.Parallel()
	srv := workertest.Start(t, workertest.Options{})
	big := strings.Repeat("x", 1<<20) // far over the pipe buffer
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: big})
	startWorker(t, srv, runOpts{argv: agentCmd(t, "no-stdin")})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)
	if got := r.OutputMap()["final_text"]; got != "answer without reading stdin" {
		t.Errorf("final_text = %q", got)
	}

	srv2 := workertest.Start(t, workertest.Options{})
	_, ids = srv2.Batch(workertest.BatchOptions{}, workertest.Case{Question: "  echo me  "})
	startWorker(t, srv2, runOpts{argv: agentCmd(t, "echo-stdin")})
	if got := srv2.WaitRollout(ids[0], waitFor, hasOutput).OutputMap()["final_text"]; got != "echo me" {
		t.Errorf("final_text = %q, want the stdin echoed, trimmed", got)
	}
}

func TestWorker_RejectedOutputFallsBackToAMinimalOne(t *testing.T) {
	t.Parallel()
	// 200 KiB of stdout makes an output over the server's 100 KiB limit:
	// 413, then one minimal output with the text capped.
	srv := workertest.Start(t, workertest.Options{API: api.Config{MaxBodyBytes: 100 << 10}})
	_, ids := srv.Batch(workertest.BatchOptions{}, workertest.Case{Question: "q"})
	w := startWorker(t, srv, runOpts{argv: agentCmd(t, "big-stdout")})
	out := srv.WaitRollout(ids[0], waitFor, hasOutput).OutputMap()
	text, _ := out["final_text"].(string)
	if len(text) == 0 || len(text) > flywheel.FallbackTextLimit || !strings.HasPrefix(text, "answer answer") {
		t.Errorf("final_text has %d bytes, want stdout capped at %d", len(text), flywheel.FallbackTextLimit)
	}
	if out["tool_calls"] != nil {
		t.Errorf("tool_calls = %v", out["tool_calls"])
	}
	ev := events(out, "output_rejected")
	if len(ev) != 1 || ev[0]["status"] != float64(413) || ev[0]["code"] != "body_too_large" {
		t.Errorf("events = %v, want the rejection", out["events"])
	}
	if n := w.outputs.Load(); n != 2 {
		t.Errorf("outputs sent = %d, want the rejected one and the minimal one", n)
	}
}

func TestWorker_RolloutConfigLeaseClamp(t *testing.T) {
	t.Parallel()
	// The server grants at most 3 s whatever is asked: heartbeats follow
	// the grant (every second), so a rollout that runs longer than the
	// grant keeps its lease.
	srv := workertest.Start(t, workertest.Options{Rollout: rollout.Config{LeaseMin: time.Second, LeaseMax: 3 * time.Second, LeaseDefault: 3 * time.Second}})
	_, ids := srv.Batch(workertest.BatchOptions{DeadlineS: 5}, workertest.Case{Question: "q"})
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	startWorker(t, srv, runOpts{argv: agentCmd(t, "wait-term", pidFile, marker), lease: 10 * time.Minute})
	r := srv.WaitRollout(ids[0], waitFor, hasOutput)
	// Killed at the deadline (5 s), past the 3 s grant: heartbeats held the
	// lease, so the output was accepted.
	if r.ExclusionReason() != "deadline_exceeded" {
		t.Fatalf("exclusion = %s, want deadline_exceeded", r.Exclusion)
	}
}
