package ui_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// findBrowser returns Debian's chromium (or another Chromium-based
// browser on PATH). Without one the browser tests skip, except under
// GYRE_REQUIRE_BROWSER=1 (CI), where they fail.
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GYRE_REQUIRE_BROWSER") == "1" {
		t.Fatal("GYRE_REQUIRE_BROWSER=1 but no chromium is installed (apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH: install it (apt-get install -y chromium) to run the browser tests")
	return ""
}

// screenshotDir is where the tests save a screenshot of each page:
// $GYRE_UI_SCREENSHOTS, else a new temporary directory that is kept.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GYRE_UI_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gyre-ui-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// tab is one browser page with what it recorded: every request it sent
// (from the page target's network events) and every console error,
// uncaught exception and browser log error (CSP violations among them).
type tab struct {
	t        *testing.T
	ctx      context.Context
	base     *url.URL
	shots    string
	mu       sync.Mutex
	requests []string
	problems []string
}

func newTab(t *testing.T, base string) *tab {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	tb := &tab{t: t, base: u, shots: screenshotDir(t)}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findBrowser(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("headless", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(tb.record))
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	tb.ctx = ctx
	return tb
}

// record keeps the events of the page target (the listener of a tab's
// context sees that target only).
func (tb *tab) record(ev any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		tb.requests = append(tb.requests, e.Request.URL)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, fmt.Sprint(a.Description, string(a.Value)))
			}
			tb.problems = append(tb.problems, "console "+string(e.Type)+": "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		tb.problems = append(tb.problems, "exception: "+e.ExceptionDetails.Text)
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
			tb.problems = append(tb.problems, "log "+string(e.Entry.Source)+": "+e.Entry.Text+" "+e.Entry.URL)
		}
	}
}

// drain returns and forgets what was recorded.
func (tb *tab) drain() (requests, problems []string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	requests, problems = tb.requests, tb.problems
	tb.requests, tb.problems = nil, nil
	return requests, problems
}

func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.t.Fatal(err)
	}
}

func eval[T any](tb *tab, js string, opts ...chromedp.EvaluateOption) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func (tb *tab) location() string {
	tb.t.Helper()
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		tb.t.Fatal(err)
	}
	return loc
}

// checkClean fails on any console problem or any request that left the
// server since the last check.
func (tb *tab) checkClean(page string) {
	tb.t.Helper()
	requests, problems := tb.drain()
	for _, p := range problems {
		tb.t.Errorf("%s: %s", page, p)
	}
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != tb.base.Scheme || u.Host != tb.base.Host {
			tb.t.Errorf("%s: a request left the server: %s", page, r)
		}
	}
	if len(requests) == 0 {
		tb.t.Errorf("%s: no request was recorded (is the network listener working?)", page)
	}
}

func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tb.shots, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// visit opens a page, waits for its main content, checks that it is
// clean, keyboard-reachable, labelled and laid out (checkLayout), and
// saves its screenshot.
func (tb *tab) visit(name, path string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.base.String()+path), chromedp.WaitVisible(chromedp.CSS("main")))
	tb.checkKeyboard(name)
	tb.checkLayout(name)
	tb.screenshot(name)
	tb.checkClean(name)
}

// controlsJS marks every visible control with data-kb and returns how
// many there are and those without an accessible name.
const controlsJS = `(() => {
  const sel = 'a[href], button, select, textarea, input:not([type=hidden]), summary, [tabindex]:not([tabindex="-1"])';
  const els = [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length > 0 && !e.disabled);
  const name = e => {
    const a = e.getAttribute('aria-label'); if (a && a.trim()) return a.trim();
    const by = e.getAttribute('aria-labelledby');
    if (by) { const t = by.split(/\s+/).map(id => (document.getElementById(id) || {}).textContent || '').join(' ').trim(); if (t) return t; }
    if (e.labels && e.labels.length) { const t = [...e.labels].map(l => l.textContent).join(' ').trim(); if (t) return t; }
    const t = (e.innerText || e.textContent || '').trim(); if (t) return t;
    return (e.getAttribute('title') || '').trim();
  };
  const unnamed = [];
  els.forEach((e, i) => { e.dataset.kb = String(i); if (!name(e)) unnamed.push(e.outerHTML.slice(0, 160)); });
  return {count: els.length, unnamed};
})()`

// checkKeyboard presses Tab through the page and fails unless every
// visible control gets the focus and has an accessible name.
func (tb *tab) checkKeyboard(page string) {
	tb.t.Helper()
	type controls struct {
		Count   int      `json:"count"`
		Unnamed []string `json:"unnamed"`
	}
	c := eval[controls](tb, controlsJS)
	for _, u := range c.Unnamed {
		tb.t.Errorf("%s: a control has no accessible name: %s", page, u)
	}
	eval[bool](tb, `(document.activeElement && document.activeElement.blur && document.activeElement.blur(), window.scrollTo(0, 0), true)`)
	reached := map[string]bool{}
	for range c.Count + 1 {
		tb.do(chromedp.KeyEvent(kb.Tab))
		if k := eval[string](tb, `(document.activeElement && document.activeElement.dataset && document.activeElement.dataset.kb) || ""`); k != "" {
			reached[k] = true
		}
	}
	if len(reached) != c.Count {
		missing := eval[[]string](tb, fmt.Sprintf(`[...document.querySelectorAll('[data-kb]')].filter(e => !%s.includes(e.dataset.kb)).map(e => e.outerHTML.slice(0, 120))`, jsList(reached)))
		tb.t.Errorf("%s: Tab reached %d of %d controls; not reached: %v", page, len(reached), c.Count, missing)
	}
}

func jsList(m map[string]bool) string {
	var b strings.Builder
	b.WriteString("[")
	for k := range m {
		fmt.Fprintf(&b, "%q,", k)
	}
	b.WriteString("]")
	return b.String()
}

// TestBrowser drives the UI in real headless Chromium over a store that
// the real API populated: sign in, every page, the click from a batch
// to a rollout's conversation, escaping, CSRF and revocation.
func TestBrowser(t *testing.T) {
	s := newServer(t)
	seed := s.seed()
	key, keyID := s.key("reader")
	tb := newTab(t, s.ts.URL)

	// Signing in: an unsigned visit lands on the form.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#key")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/signin") {
		t.Fatalf("unsigned visit landed on %s", loc)
	}
	tb.checkKeyboard("signin")
	tb.screenshot("signin")
	tb.checkClean("signin")
	tb.do(chromedp.SendKeys(chromedp.CSS("#key"), key), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#chart-states")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/") {
		t.Fatalf("after sign-in: %s", loc)
	}
	if strings.Contains(tb.location(), key) {
		t.Fatal("the key is in the URL")
	}
	tb.checkClean("sign-in")

	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"overview-support-bot", "/ui/?agent=support-bot"},
		{"batches", "/ui/batches"},
		{"batches-running", "/ui/batches?state=running"},
		{"batch", "/ui/batches/" + seed.Batch},
		{"batch-filtered", "/ui/batches/" + seed.Batch + "?exclusion=none&outcome=passed"},
		{"batch-running", "/ui/batches/" + seed.Running},
		{"rollout-passed", "/ui/rollouts/" + seed.Passed},
		{"rollout-xss-unknown-outcome", "/ui/rollouts/" + seed.XSS},
		{"rollout-excluded", "/ui/rollouts/" + seed.Excluded},
		{"rollout-unreported-off-policy", "/ui/rollouts/" + seed.Unreported},
	}
	for _, p := range pages {
		tb.visit(p.name, p.path)
	}
	// A page of nothing answers 404 with a page that says so; the browser
	// logs the status, and nothing else may go wrong.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/rollouts/0190b7a1-0000-7000-8000-000000000000"), chromedp.WaitVisible(chromedp.CSS("main [role=alert]")))
	tb.checkKeyboard("not-found")
	tb.screenshot("not-found")
	tb.mu.Lock()
	var rest []string
	for _, p := range tb.problems {
		if !strings.Contains(p, "status of 404") {
			rest = append(rest, p)
		}
	}
	tb.problems = rest
	tb.mu.Unlock()
	tb.checkClean("not-found")

	// A running batch refreshes its counts with htmx.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/batches/"+seed.Running), chromedp.WaitVisible(chromedp.CSS("#batch-live[hx-get]")))
	if !eval[bool](tb, `typeof htmx === "object" && htmx.config.includeIndicatorStyles === false`) {
		t.Error("htmx did not load with includeIndicatorStyles off")
	}
	tb.checkClean("batch-running live")

	// From a batch to a rollout's conversation, by clicking.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/batches/"+seed.Batch), chromedp.WaitVisible(chromedp.CSS("main")),
		chromedp.Click(chromedp.CSS(`a[href="/ui/rollouts/`+seed.Passed+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#conversation")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/rollouts/"+seed.Passed) {
		t.Fatalf("the click landed on %s", loc)
	}
	type chat struct {
		Messages  int      `json:"messages"`
		Roles     []string `json:"roles"`
		ToolCalls int      `json:"tool_calls"`
	}
	c := eval[chat](tb, `(() => { const m = [...document.querySelectorAll('.chat .msg')];
	  return {messages: m.length, roles: m.map(e => e.querySelector('.role').textContent.split(' ')[0].trim()),
	    tool_calls: document.querySelectorAll('.chat details summary').length}; })()`)
	if want := []string{"system", "user", "assistant", "tool", "assistant"}; strings.Join(c.Roles, ",") != strings.Join(want, ",") || c.ToolCalls < 2 {
		t.Errorf("conversation: %+v, want roles %v with a collapsible tool call and tool result", c, want)
	}
	tb.screenshot("rollout-conversation")
	tb.checkClean("rollout conversation")

	// Agent output is shown as text and never runs.
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/rollouts/"+seed.XSS), chromedp.WaitVisible(chromedp.CSS("#final-text")))
	if got := eval[string](tb, `document.querySelector('#final-text').textContent`); got != xssText {
		t.Errorf("final text shown as %q, want the text %q", got, xssText)
	}
	if eval[bool](tb, `window.gyreXSS !== undefined || document.scripts.length !== 1`) {
		t.Error("the agent's markup ran or added a script")
	}
	tb.checkClean("xss")

	// A POST without the CSRF token is refused, and the session lives on.
	if status := eval[int](tb, `fetch('/ui/signout', {method: 'POST', body: new URLSearchParams()}).then(r => r.status)`, chromedp.EvalAwaitPromise); status != 403 {
		t.Errorf("sign-out without the CSRF token: %d, want 403", status)
	}
	tb.drain() // the browser logs the refused fetch
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/batches"), chromedp.WaitVisible(chromedp.CSS("main")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/batches") {
		t.Fatalf("after the refused POST the session is gone: %s", loc)
	}

	// Revoking the key ends the session at the next request.
	s.call("DELETE", "/api/v1/keys/"+keyID, s.admin, nil, 204, nil)
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/batches"), chromedp.WaitVisible(chromedp.CSS("#key")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/signin") {
		t.Errorf("after revoking the key: %s, want the sign-in page", loc)
	}
}
