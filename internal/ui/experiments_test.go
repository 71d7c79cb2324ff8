package ui_test

import (
	"net/http"

	"github.com/gyrehq/gyre"
	"regexp"
	"strings"
	"testing"
)

// TestExperimentPages: the experiments list filters, an experiment's grid
// shows every run's verdict (an error distinct from a failure) linked to
// its run, compare puts the regression first, and a run shows its ATIF
// trajectory a page of steps at a time, escaped.
func TestExperimentPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ev := s.seedEval()
	c := s.client()
	if p := c.signIn(s.reader); p.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", p.status)
	}

	list := c.get("/ui/experiments")
	if list.status != 200 || !strings.Contains(list.body, ev.A) || !strings.Contains(list.body, ev.B) ||
		!strings.Contains(list.body, "60.0%") || !strings.Contains(list.body, "4 · 6 · 0 · 2") {
		t.Fatalf("experiments list: %d\n%s", list.status, list.body)
	}
	if p := c.get("/ui/experiments?state=running"); p.status != 200 || strings.Contains(p.body, ev.A) || !strings.Contains(p.body, "No experiment matches") {
		t.Errorf("running filter: %d, lists a finished experiment or says nothing", p.status)
	}
	if p := c.get("/ui/experiments?suite=desk&state=finished&since=2000-01-01"); p.status != 200 || !strings.Contains(p.body, ev.A) {
		t.Errorf("suite, state and since filters: %d, want both experiments", p.status)
	}
	if p := c.get("/ui/experiments?until=2000-01-01"); p.status != 200 || strings.Contains(p.body, ev.A) {
		t.Errorf("until filter: %d, lists a later experiment", p.status)
	}
	for _, bad := range []string{"state=paused", "since=yesterday", "suite=a/b"} {
		if p := c.get("/ui/experiments?" + bad); p.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, p.status)
		}
	}

	exp := c.get("/ui/experiments/" + ev.B)
	if exp.status != 200 {
		t.Fatalf("experiment: %d\n%s", exp.status, exp.body)
	}
	for _, want := range []string{
		`class="badge b-error" href="/ui/experiments/` + ev.B + `/runs/sandbox-died/1"`,
		`class="badge b-failed" href="/ui/experiments/` + ev.B + `/runs/daydream/2"`,
		`class="badge b-ok" href="/ui/experiments/` + ev.B + `/runs/hello-openhands/1"`,
		"pass@2", "4f2c9e1b7a", "served-model",
	} {
		if !strings.Contains(exp.body, want) {
			t.Errorf("experiment page lacks %q", want)
		}
	}
	if strings.Contains(exp.body, `hx-trigger="every`) {
		t.Error("a finished experiment still refreshes")
	}

	// A running experiment (created, not finished) refreshes its report
	// and grid from the live fragment.
	var created struct {
		ID string `json:"id"`
	}
	evaluator, _ := s.key(gyre.RoleEvaluator)
	s.call("POST", "/api/v1/experiments", evaluator, map[string]any{"suite": "desk", "suite_version": "1", "harness": "h",
		"capabilities": map[string]any{"agent": "a"}}, http.StatusCreated, &created)
	running := c.get("/ui/experiments/" + created.ID)
	if running.status != 200 || !strings.Contains(running.body, `hx-get="/ui/experiments/`+created.ID+`/live"`) ||
		!strings.Contains(running.body, "No run of this experiment has been recorded yet.") {
		t.Errorf("running experiment: %d, no live refresh or no empty-grid sentence", running.status)
	}
	live := c.get("/ui/experiments/" + created.ID + "/live")
	if live.status != 200 || !strings.Contains(live.body, `id="experiment-live"`) || strings.Contains(live.body, "<html") {
		t.Errorf("live fragment: %d\n%s", live.status, live.body)
	}
	if p := c.get("/ui/experiments?state=running"); !strings.Contains(p.body, created.ID) {
		t.Error("the running filter does not list the running experiment")
	}

	cmp := c.get("/ui/compare?a=" + ev.A + "&b=" + ev.B)
	if cmp.status != 200 || !strings.Contains(cmp.body, "regression") {
		t.Fatalf("compare: %d\n%s", cmp.status, cmp.body)
	}
	rows := regexp.MustCompile(`<th scope="row" class="mono">([^<]+)</th>`).FindAllStringSubmatch(cmp.body, -1)
	if len(rows) == 0 || rows[0][1] != "daydream" {
		t.Errorf("compare rows %v: the new failure (daydream) is not first", rows)
	}
	// Token deltas are whole counts with a sign, or a dash when a side
	// did not report tokens: never a fraction, never 0 for unknown.
	tokens := regexp.MustCompile(`<td class="num">([^<]*)</td>\s*<td class="num">[^<]*</td>\s*</tr>`).FindAllStringSubmatch(cmp.body, -1)
	if len(tokens) != len(rows) {
		t.Fatalf("compare: %d token cells for %d rows", len(tokens), len(rows))
	}
	known := 0
	for i, m := range tokens {
		if !regexp.MustCompile(`^(—|0|[+-][1-9][0-9]*)$`).MatchString(m[1]) {
			t.Errorf("case %s: Tokens Δ %q, want a signed whole count or a dash", rows[i][1], m[1])
		}
		if m[1] != "—" {
			known++
		}
	}
	if known == 0 {
		t.Error("compare: no case shows a known token delta (the seed reports tokens)")
	}
	// The interval of a difference of rates is in percentage points, as
	// the difference is.
	if !regexp.MustCompile(`95% paired bootstrap interval -?[0-9.]+ pp to [+-]?[0-9.]+ pp over`).MatchString(cmp.body) {
		t.Error("compare: the paired interval is not in percentage points")
	}
	if p := c.get("/ui/compare?a=nope&b=" + ev.B); p.status != http.StatusBadRequest {
		t.Errorf("compare with a bad id: %d, want 400", p.status)
	}

	run := c.get("/ui/experiments/" + ev.B + "/runs/big/1")
	if run.status != 200 {
		t.Fatalf("run: %d\n%s", run.status, run.body)
	}
	if n := strings.Count(run.body, `<article class="step`); n != 25 {
		t.Errorf("the run page renders %d steps, want the first 25", n)
	}
	if strings.Contains(run.body, "<script>window.gyreXSS") || !strings.Contains(run.body, "&lt;script&gt;window.gyreXSS") {
		t.Error("the trajectory's markup is not escaped")
	}
	more := regexp.MustCompile(`hx-get="([^"]+/steps\?from=25)"`).FindStringSubmatch(run.body)
	if more == nil {
		t.Fatal("no block loads the next steps")
	}
	frag := c.get(strings.ReplaceAll(more[1], "&amp;", "&"))
	if frag.status != 200 || !strings.Contains(frag.body, `id="step-26"`) || strings.Contains(frag.body, "<html") {
		t.Errorf("next steps fragment: %d, want step 26 without the layout", frag.status)
	}
	if len(run.body) > 1<<20 {
		t.Errorf("the first render of a 5 MB trajectory is %d bytes", len(run.body))
	}
	if p := c.get("/ui/experiments/" + ev.B + "/runs/big/1/steps?from=999999"); p.status != http.StatusBadRequest {
		t.Errorf("steps past the end: %d, want 400", p.status)
	}
	if p := c.get("/ui/experiments/" + ev.B + "/runs/invalid-atif/1"); p.status != 200 || !strings.Contains(p.body, "not valid ATIF") ||
		!strings.Contains(p.body, `<article class="step`) {
		t.Errorf("invalid trajectory run: %d, does not say it is not valid ATIF or shows no step", p.status)
	}
	// A step's LLM call count agrees with its noun.
	if p := c.get("/ui/experiments/" + ev.B + "/runs/daydream/1"); p.status != 200 || !strings.Contains(p.body, ">1 LLM call</span>") ||
		strings.Contains(p.body, ">1 LLM calls<") {
		t.Errorf("daydream run: %d, a step of one LLM call does not say \"1 LLM call\"", p.status)
	}
	if p := c.get("/ui/experiments/" + ev.B + "/runs/sandbox-died/1"); p.status != 200 || !strings.Contains(p.body, "not counted as a model failure") {
		t.Errorf("errored run: %d, does not set the error apart from a failure", p.status)
	}
	if p := c.get("/ui/experiments/" + ev.B + "/runs/big/9"); p.status != http.StatusNotFound {
		t.Errorf("a repetition that was not run: %d, want 404", p.status)
	}
	dl := c.get("/ui/experiments/" + ev.B + "/runs/big/1/trajectory")
	if dl.status != 200 || len(dl.body) < 5<<20 || dl.header.Get("Content-Disposition") == "" {
		t.Errorf("trajectory download: %d, %d bytes", dl.status, len(dl.body))
	}
}

// TestTurnsPage: production turns list by conversation in order, with
// null kept apart from empty and unknown apart from ok, and escaped.
func TestTurnsPage(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.seedTurns()
	c := s.client()
	c.signIn(s.reader)
	all := c.get("/ui/turns")
	if all.status != 200 || !strings.Contains(all.body, "t-3") || !strings.Contains(all.body, "input_text: null") {
		t.Fatalf("turns: %d\n%s", all.status, all.body)
	}
	conv := c.get("/ui/turns?conversation=conv-42")
	if conv.status != 200 || strings.Contains(conv.body, "t-3") {
		t.Fatalf("conversation filter: %d, shows another conversation's turn", conv.status)
	}
	if i, j := strings.Index(conv.body, ">t-1<"), strings.Index(conv.body, ">t-2<"); i < 0 || j < i {
		t.Errorf("conversation turns out of order (t-1 at %d, t-2 at %d)", i, j)
	}
	if !strings.Contains(conv.body, "unknown — not ok") || strings.Contains(conv.body, "<script>window") {
		t.Error("unknown outcome not set apart, or agent text not escaped")
	}
	if p := c.get("/ui/turns?since=soon"); p.status != http.StatusBadRequest {
		t.Errorf("bad since: %d, want 400", p.status)
	}
	if p := c.get("/ui/turns?agent=nobody"); p.status != 200 || !strings.Contains(p.body, "No turn matches") {
		t.Errorf("empty filter result: %d, says nothing", p.status)
	}
}
