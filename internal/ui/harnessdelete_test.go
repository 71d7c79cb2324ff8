package ui_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
)

// Deleting a registered harness: only an admin sees the control, a
// confirmation page comes first, the POST needs the session's CSRF token
// and deletes the harness and its sealed key, a reader's POST is refused
// and deletes nothing, and an unknown or deleted harness is a 404 page.
func TestDeletingAHarnessIsAnAdminsConfirmedPost(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	hs := httptest.NewServer(&standIn{})
	t.Cleanup(hs.Close)

	admin := s.client()
	admin.signIn(s.admin)
	csrf := hidden(t, admin.get("/ui/harnesses").body, "csrf")
	reg := admin.post("/ui/harnesses", url.Values{"csrf": {csrf}, "name": {"desk"}, "base_url": {hs.URL}, "api_key": {"k-secret-1"}})
	if reg.status != http.StatusSeeOther {
		t.Fatalf("register: %d\n%s", reg.status, reg.body)
	}
	hpath := reg.header.Get("Location")
	id := strings.TrimPrefix(hpath, "/ui/harnesses/")
	stored := func() bool {
		t.Helper()
		_, err := s.st.HarnessByID(t.Context(), s.tenant.ID, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	t.Run("a reader sees no delete control and is refused", func(t *testing.T) {
		rd := s.client()
		rd.signIn(s.reader)
		list := rd.get("/ui/harnesses")
		if strings.Contains(list.body, "/delete") || strings.Contains(rd.get(hpath).body, "/delete") {
			t.Fatal("a reader's pages link the deletion")
		}
		if p := rd.get(hpath + "/delete"); p.status != http.StatusForbidden {
			t.Errorf("reader's confirmation page: %d", p.status)
		}
		if p := rd.post(hpath+"/delete", url.Values{"csrf": {hidden(t, list.body, "csrf")}}); p.status != http.StatusForbidden || !strings.Contains(p.body, "Only an admin key") {
			t.Errorf("reader's POST: %d\n%s", p.status, p.body)
		}
		if !stored() {
			t.Fatal("a reader's POST deleted the harness")
		}
	})
	t.Run("an admin sees the control on the list and the harness's page", func(t *testing.T) {
		for _, path := range []string{"/ui/harnesses", hpath} {
			if p := admin.get(path); !strings.Contains(p.body, `href="`+hpath+`/delete"`) {
				t.Errorf("%s has no delete link", path)
			}
		}
		if p := admin.get("/ui/harnesses"); !strings.Contains(p.body, `aria-label="Delete harness desk"`) {
			t.Error("the list's delete link has no name naming the harness")
		}
	})
	t.Run("the confirmation page says what goes and holds the form", func(t *testing.T) {
		p := admin.get(hpath + "/delete")
		for _, want := range []string{"Delete harness <span class=\"mono\">desk</span>?", "deletes its encrypted API key", "Nothing else changes",
			`action="` + hpath + `/delete"`, `name="csrf"`, ">Cancel</a>"} {
			if !strings.Contains(p.body, want) {
				t.Errorf("confirmation page lacks %q", want)
			}
		}
		if p.status != http.StatusOK || strings.Contains(p.body, "k-secret-1") || !stored() {
			t.Fatalf("confirmation: %d, or it deleted already", p.status)
		}
	})
	t.Run("a POST without the CSRF token deletes nothing", func(t *testing.T) {
		if p := admin.post(hpath+"/delete", url.Values{}); p.status != http.StatusForbidden || !stored() {
			t.Fatalf("CSRF-less POST: %d, stored %v", p.status, stored())
		}
	})
	t.Run("the confirmed POST deletes it and the key with it", func(t *testing.T) {
		p := admin.post(hpath+"/delete", url.Values{"csrf": {csrf}})
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/harnesses?deleted=1" {
			t.Fatalf("delete: %d %v", p.status, p.header)
		}
		if stored() {
			t.Fatal("the harness is still stored")
		}
		list := admin.get("/ui/harnesses?deleted=1")
		if !strings.Contains(list.body, "The harness was deleted") || strings.Contains(list.body, `href="`+hpath+`"`) {
			t.Fatalf("list after the deletion:\n%s", list.body)
		}
		for _, path := range []string{hpath, hpath + "/delete"} {
			if p := admin.get(path); p.status != http.StatusNotFound {
				t.Errorf("%s after the deletion: %d", path, p.status)
			}
		}
		if p := admin.post(hpath+"/delete", url.Values{"csrf": {csrf}}); p.status != http.StatusNotFound {
			t.Errorf("a second deletion: %d", p.status)
		}
	})
	t.Run("a harness that does not answer can still be deleted from its page", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		reg := admin.post("/ui/harnesses", url.Values{"csrf": {csrf}, "name": {"gone"}, "base_url": {deadURL}})
		if reg.status != http.StatusSeeOther {
			t.Fatalf("register: %d\n%s", reg.status, reg.body)
		}
		gone := reg.header.Get("Location")
		p := admin.get(gone)
		if p.status != http.StatusBadGateway || !strings.Contains(p.body, "harness_unreachable") || !strings.Contains(p.body, `href="`+gone+`/delete"`) {
			t.Fatalf("the unreachable harness's page: %d, lacks its failure or the delete link\n%s", p.status, p.body)
		}
		if p := admin.post(gone+"/delete", url.Values{"csrf": {csrf}}); p.status != http.StatusSeeOther {
			t.Fatalf("delete: %d", p.status)
		}
	})
	t.Run("an unknown id is a 404 page", func(t *testing.T) {
		if p := admin.post("/ui/harnesses/0190c3b2-0000-7000-8000-000000000000/delete", url.Values{"csrf": {csrf}}); p.status != http.StatusNotFound {
			t.Errorf("unknown id: %d", p.status)
		}
	})
}
