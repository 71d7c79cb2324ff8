package ui_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// signIn signs the tab in with key through the form. It waits for the
// sign-out form, which only a signed-in page has: waiting for anything the
// sign-in page also has would let the next navigation abort the form's
// (net::ERR_ABORTED).
func (tb *tab) signIn(key string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.base.String()+"/ui/signin"), chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitReady(chromedp.CSS(`form.who`)))
	tb.drain()
}

// TestBrowserEvaluation drives the evaluation pages in real headless
// Chromium over experiments the evaluator recorded through the API and
// turns posted to /turns: every page clean, labelled and reachable by
// Tab; the click from an experiment's grid to a run's trajectory; a 5 MB
// trajectory rendered a page of steps at a time; agent text inert.
func TestBrowserEvaluation(t *testing.T) {
	s := newServer(t)
	ev := s.seedEval()
	s.seedTurns()
	tb := newTab(t, s.ts.URL)
	tb.signIn(s.reader)

	runBase := "/ui/experiments/" + ev.B + "/runs/"
	pages := []struct{ name, path string }{
		{"experiments", "/ui/experiments"},
		{"experiments-none-running", "/ui/experiments?state=running"},
		{"experiment", "/ui/experiments/" + ev.B},
		{"compare-choose", "/ui/compare"},
		{"compare", "/ui/compare?a=" + ev.A + "&b=" + ev.B},
		{"run-openhands", runBase + "hello-openhands/1"},
		{"run-summarization", runBase + "summarize/1"},
		{"run-invalid-atif", runBase + "invalid-atif/1"},
		{"run-error", runBase + "sandbox-died/1"},
		{"turns", "/ui/turns"},
		{"turns-conversation", "/ui/turns?conversation=conv-42"},
		{"turns-none", "/ui/turns?agent=nobody"},
		{"turns-window", "/ui/turns?agent=support-bot&since=2000-01-01&until=2999-12-31"},
	}
	for _, p := range pages {
		tb.visit(p.name, p.path)
	}
	// A refused filter on these lists is a message above the form, which
	// keeps the refused value to correct.
	for _, p := range []struct{ name, path, field, value string }{
		{"experiments-bad-filter", "/ui/experiments?until=someday", "#f-until", "someday"},
		{"turns-bad-filter", "/ui/turns?since=someday", "#f-since", "someday"},
	} {
		tb.do(chromedp.Navigate(s.ts.URL+p.path), chromedp.WaitVisible(chromedp.CSS("main [role=alert]")))
		if v := eval[string](tb, `document.querySelector('`+p.field+`').value`); v != p.value {
			t.Errorf("%s: the refused field holds %q", p.name, v)
		}
		tb.checkKeyboard(p.name)
		tb.checkLayout(p.name)
		tb.screenshot(p.name)
		tb.dropProblems("status of 400") // the browser logs the page's status
		tb.checkClean(p.name)
	}

	// From an experiment's grid to a run's trajectory, by clicking.
	cell := `a[href="` + runBase + `daydream/1"]`
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/experiments/"+ev.B), chromedp.WaitVisible(chromedp.CSS(cell)),
		chromedp.Click(chromedp.CSS(cell)), chromedp.WaitVisible(chromedp.CSS("#steps")))
	if loc := tb.location(); !strings.HasSuffix(loc, runBase+"daydream/1") {
		t.Fatalf("the click landed on %s", loc)
	}
	if n := eval[int](tb, `document.querySelectorAll('#steps .step').length`); n == 0 {
		t.Error("the run's trajectory shows no step")
	}
	tb.screenshot("run-daydream-from-grid")
	tb.checkClean("click to trajectory")

	// A 5 MB trajectory: the first page, then the next on "more", then
	// the next as the user scrolls to it.
	tb.do(chromedp.Navigate(s.ts.URL+runBase+"big/1"), chromedp.WaitVisible(chromedp.CSS("#steps .more button")))
	steps := func() int { return eval[int](tb, `document.querySelectorAll('#steps .step').length`) }
	if n := steps(); n != 25 {
		t.Fatalf("first render: %d steps, want 25", n)
	}
	if got := eval[string](tb, `document.querySelector('#step-1 .text').textContent`); !strings.HasPrefix(got, xssText) {
		t.Errorf("step 1 shows %.80q, want the markup as text", got)
	}
	if eval[bool](tb, `window.gyreXSS !== undefined`) {
		t.Error("markup in the trajectory ran")
	}
	tb.screenshot("run-big-first-page")
	tb.do(chromedp.Click(chromedp.CSS("#steps .more button")), chromedp.WaitVisible(chromedp.CSS("#step-26")))
	tb.do(chromedp.ScrollIntoView(chromedp.CSS("#steps .more")), chromedp.WaitVisible(chromedp.CSS("#step-51")))
	if n := steps(); n < 75 {
		t.Errorf("after a click and a scroll: %d steps, want at least 75", n)
	}
	if dup := eval[int](tb, `(() => { const ids = [...document.querySelectorAll('#steps .step')].map(e => e.id); return ids.length - new Set(ids).size; })()`); dup != 0 {
		t.Errorf("%d steps were loaded twice", dup)
	}
	total := eval[int](tb, `document.querySelectorAll('#steps .step').length`)
	if html := eval[int](tb, `document.documentElement.outerHTML.length`); html > 3<<20 {
		t.Errorf("the page holds %d bytes of HTML after %d steps: not progressive", html, total)
	}
	tb.checkClean("big trajectory")
}
