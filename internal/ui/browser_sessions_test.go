package ui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserSessions drives the sessions browser in real headless
// Chromium: an admin registers a stand-in harness with the form, lists
// its sessions, filters them and opens a run's trajectory; every page is
// clean (no console error, no request leaving the server),
// keyboard-reachable and labelled, and the register form is refused
// without its CSRF token.
func TestBrowserSessions(t *testing.T) {
	s := newServer(t)
	hs := httptest.NewServer(&standIn{})
	t.Cleanup(hs.Close)
	tb := newTab(t, s.ts.URL)
	tb.signIn(s.admin)
	tb.visit("harnesses-empty", "/ui/harnesses")

	js := `fetch('/ui/harnesses', {method: 'POST', body: new URLSearchParams({name: 'x', base_url: 'https://example.com'})}).then(r => r.status)`
	if status := eval[int](tb, js, chromedp.EvalAwaitPromise); status != http.StatusForbidden {
		t.Errorf("POST /ui/harnesses without the CSRF token: %d, want 403", status)
	}
	tb.drain() // the browser logs the refused fetch

	tb.do(chromedp.SetValue(chromedp.CSS("#h-name"), "desk"), chromedp.SetValue(chromedp.CSS("#h-base"), hs.URL),
		chromedp.SetValue(chromedp.CSS("#h-key"), "k-secret-1"), chromedp.Submit(chromedp.CSS(`form.create button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#sessions")))
	loc := tb.location()
	i := strings.Index(loc, "/ui/harnesses/")
	if i < 0 {
		t.Fatalf("the register form landed on %s", loc)
	}
	hpath := loc[i:]
	tb.checkClean("harness-registered")
	for _, p := range []struct{ name, path string }{
		{"harnesses", "/ui/harnesses"},
		{"harness-sessions", hpath},
		{"harness-sessions-filtered", hpath + "?user_id=u7&since=2026-01-01T00:00:00Z"},
		{"harness-run", hpath + "/runs/r2"},
	} {
		tb.visit(p.name, p.path)
	}
	if n := eval[int](tb, `document.querySelectorAll('#steps .step').length`); n != 3 {
		t.Errorf("the run's trajectory shows %d steps, want 3", n)
	}
	if body := eval[string](tb, `document.body.innerHTML`); strings.Contains(body, "k-secret-1") {
		t.Errorf("a page shows the harness's API key")
	}

	// Deleting it: a confirmation page first, a POST refused without the
	// CSRF token, then the confirmed form, which lands on the list.
	tb.visit("harness-delete-confirm", hpath+"/delete")
	js = `fetch('` + hpath + `/delete', {method: 'POST'}).then(r => r.status)`
	if status := eval[int](tb, js, chromedp.EvalAwaitPromise); status != http.StatusForbidden {
		t.Errorf("POST %s/delete without the CSRF token: %d, want 403", hpath, status)
	}
	tb.drain()
	tb.do(chromedp.Navigate(s.ts.URL+hpath+"/delete"), chromedp.WaitVisible(chromedp.CSS("form.confirm")),
		chromedp.Submit(chromedp.CSS(`form.confirm button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS("main [role=status]")))
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/harnesses?deleted=1") {
		t.Errorf("the confirmed deletion landed on %s", loc)
	}
	if n := eval[int](tb, `document.querySelectorAll('main a[href="`+hpath+`"]').length`); n != 0 {
		t.Errorf("the deleted harness is still listed")
	}
	tb.checkKeyboard("harnesses-deleted")
	tb.screenshot("harnesses-deleted")
	tb.checkClean("harnesses-deleted")

	// A rollout of Responses and Messages calls: its conversation shows
	// the call with no chat form as a note and its native JSON, folded.
	id := s.nativeRollout()
	tb.do(chromedp.Navigate(s.ts.URL+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("main")))
	for range 100 {
		if eval[int](tb, `document.querySelectorAll('.msg-native').length`) == 1 {
			break
		}
		tb.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("main")))
	}
	tb.visit("rollout-native-calls", "/ui/rollouts/"+id)
	if n := eval[int](tb, `document.querySelectorAll('.msg-native details pre').length`); n != 1 {
		t.Errorf("the rollout page shows %d native calls, want 1", n)
	}
}
