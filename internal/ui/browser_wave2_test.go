package ui_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserDatasetsAndPromotions drives the dataset, policy and
// promotion pages in real headless Chromium, as an admin and as a
// reader: every page clean (no console error, no request leaving the
// server), keyboard-reachable and labelled; the create and rollback forms
// refused without the CSRF token; a reader sees no admin form.
func TestBrowserDatasetsAndPromotions(t *testing.T) {
	s := newServer(t)
	seed := s.seedWave2()
	tb := newTab(t, s.ts.URL)
	tb.signIn(s.admin)
	pages := []struct{ name, path string }{
		{"datasets-admin", "/ui/datasets"},
		{"dataset-sft", "/ui/datasets/" + seed.Dataset},
		{"dataset-empty-dpo", "/ui/datasets/" + seed.Empty},
		{"policies", "/ui/policies"},
		{"policy-p2", "/ui/policies/p2"},
		{"promotions", "/ui/promotions"},
		{"promotion", "/ui/promotions/" + seed.Promotion},
		{"agent-policy-admin", "/ui/agents/support-bot"},
	}
	for _, p := range pages {
		tb.visit(p.name, p.path)
	}
	// The not-exported reasons are codes such as
	// excluded:substrate_unavailable: on a narrow screen too they wrap at
	// the colon, never inside a word.
	tb.atWidth(640, func() {
		tb.visit("dataset-sft-narrow", "/ui/datasets/"+seed.Dataset)
		if n := eval[int](tb, `[...document.querySelectorAll('td.code')].filter(e => e.textContent.includes(':')).length`); n == 0 {
			t.Error("the dataset page shows no reason code with a colon to check")
		}
	})
	// The datasets list filters with its GET form; the filter stays in
	// the URL, and an empty result says so.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/datasets"), chromedp.WaitVisible(chromedp.CSS("#f-agent")),
		chromedp.SetValue(chromedp.CSS("#f-agent"), "support-bot"), chromedp.SetValue(chromedp.CSS("#f-state"), "ready"),
		chromedp.Submit(chromedp.CSS(`form.filters button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS("#f-agent")))
	if loc := tb.location(); !strings.Contains(loc, "agent=support-bot") || !strings.Contains(loc, "state=ready") {
		t.Errorf("the filter form went to %s", loc)
	}
	if n := eval[int](tb, `document.querySelectorAll('main table tbody tr').length`); n != 2 {
		t.Errorf("support-bot's ready datasets: %d rows, want 2", n)
	}
	tb.drain()
	tb.visit("datasets-filtered-empty", "/ui/datasets?state=failed")
	if msg := eval[string](tb, `document.querySelector('main .empty').textContent`); msg != "No dataset matches these filters." {
		t.Errorf("an empty filtered list says %q", msg)
	}

	// A refused filter is a message above the form, which keeps the
	// refused value to correct.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/datasets?since=someday"), chromedp.WaitVisible(chromedp.CSS("main [role=alert]")))
	if v := eval[string](tb, `document.querySelector('#f-since').value`); v != "someday" {
		t.Errorf("the refused date field holds %q", v)
	}
	tb.checkKeyboard("datasets-bad-filter")
	tb.screenshot("datasets-bad-filter")
	tb.dropProblems("status of 400") // the browser logs the page's status
	tb.checkClean("datasets-bad-filter")

	// The evidence chart is drawn, with its text alternative.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/promotions/"+seed.Promotion), chromedp.WaitVisible(chromedp.CSS("#chart-evidence svg")))
	if n := eval[int](tb, `document.querySelectorAll('#chart-evidence .chart-data tbody tr').length`); n != 2 {
		t.Errorf("the evidence chart's table has %d tasks, want 2", n)
	}
	tb.drain()

	// Neither admin form is accepted without the CSRF token.
	for _, path := range []string{"/ui/datasets", "/ui/agents/support-bot/rollback"} {
		js := `fetch('` + path + `', {method: 'POST', body: new URLSearchParams({agent: 'support-bot', format: 'sft'})}).then(r => r.status)`
		if status := eval[int](tb, js, chromedp.EvalAwaitPromise); status != 403 {
			t.Errorf("POST %s without the CSRF token: %d, want 403", path, status)
		}
	}
	tb.drain() // the browser logs the refused fetches

	// A rollback with nothing to restore is a message on the page.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/agents/queued-bot"), chromedp.WaitVisible(chromedp.CSS("main")),
		chromedp.Submit(chromedp.CSS(`form[action$="/rollback"] button`)), chromedp.WaitVisible(chromedp.CSS("main [role=alert]")))
	if msg := eval[string](tb, `document.querySelector('main [role=alert]').textContent`); !strings.Contains(msg, "no_previous_policy") {
		t.Errorf("rollback with no previous policy says %q", msg)
	}
	tb.checkKeyboard("agent-rollback-refused")
	tb.screenshot("agent-rollback-refused")
	tb.dropProblems("status of 409") // the browser logs the 409 status, nothing else may go wrong
	tb.checkClean("agent-rollback-refused")

	// Creating a dataset with the form lands on its page, which follows
	// the build (htmx) until the manifest shows.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/datasets"), chromedp.WaitVisible(chromedp.CSS("#c-format")),
		chromedp.SetValue(chromedp.CSS("#c-agent"), "support-bot"), chromedp.SetValue(chromedp.CSS("#c-format"), "atif"), chromedp.Submit(chromedp.CSS(`form.create button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#dataset-live")))
	if loc := tb.location(); !strings.Contains(loc, "/ui/datasets/") {
		t.Fatalf("the create form landed on %s", loc)
	}
	tb.do(chromedp.WaitVisible(chromedp.CSS("#chart-not-exported")))
	tb.screenshot("dataset-created")
	tb.checkClean("dataset-created")

	// A reader sees the same pages without either admin form.
	key, _ := s.key("reader")
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("main")))
	tb.do(chromedp.Submit(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.CSS("#key")))
	tb.signIn(key)
	for _, p := range []struct{ name, path string }{{"datasets-reader", "/ui/datasets"}, {"agent-policy-reader", "/ui/agents/support-bot"}} {
		tb.visit(p.name, p.path)
		if n := eval[int](tb, `document.querySelectorAll('main form[method=post]').length`); n != 0 {
			t.Errorf("%s: a reader sees %d admin forms", p.name, n)
		}
	}
}

// dropProblems forgets the console problems that hold text (the browser
// logs a page's error status, which the test expects).
func (tb *tab) dropProblems(text string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var rest []string
	for _, p := range tb.problems {
		if !strings.Contains(p, text) {
			rest = append(rest, p)
		}
	}
	tb.problems = rest
}
