package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// harnessesPage is how many registered harnesses the list shows a page.
const harnessesPage = 25

// errNoRegistry is the page of a server whose UI was built without the
// harness registry.
var errNoRegistry = &pageError{http.StatusNotFound, "This server's UI has no harness registry configured, so the sessions browser is not available."}

// harnessForm is the register form as the user filled it in; the key is
// never sent back.
type harnessForm struct {
	Name, BaseURL string
}

type harnessesData struct {
	Rows         []store.Harness
	Cursor, Next string
	Form         harnessForm
	Error        string
	// Deleted says the page follows a deletion.
	Deleted bool
}

// harnessList is GET /ui/harnesses?cursor: the tenant's registered
// harnesses by name, and the register form for admins.
func (u *UI) harnessList(w http.ResponseWriter, r *http.Request, s session) error {
	return u.showHarnesses(w, r, s, http.StatusOK, harnessForm{}, "")
}

func (u *UI) showHarnesses(w http.ResponseWriter, r *http.Request, s session, status int, form harnessForm, msg string) error {
	if u.harnesses == nil {
		return errNoRegistry
	}
	d := harnessesData{Cursor: r.URL.Query().Get("cursor"), Form: form, Error: msg, Deleted: r.URL.Query().Get("deleted") == "1"}
	var err error
	if d.Rows, d.Next, err = u.harnesses.List(r.Context(), s.TenantID, store.Page{Limit: harnessesPage, Cursor: d.Cursor}); err != nil {
		return err
	}
	u.render(w, r, status, "harnesses", view{Title: "Harnesses", Nav: "harnesses", Session: s, Data: d})
	return nil
}

// registerHarness is POST /ui/harnesses (admins): the same registration
// as POST /api/v1/harnesses. A refused form comes back with the reason
// and the values typed, except the key.
func (u *UI) registerHarness(w http.ResponseWriter, r *http.Request, s session) error {
	if !s.Admin() {
		return &pageError{http.StatusForbidden, "Only an admin key registers harnesses."}
	}
	if u.harnesses == nil {
		return errNoRegistry
	}
	form := harnessForm{Name: r.PostFormValue("name"), BaseURL: r.PostFormValue("base_url")}
	in := harness.Input{Name: &form.Name, BaseURL: &form.BaseURL}
	if k := r.PostFormValue("api_key"); k != "" {
		in.APIKey = &k
	}
	h, _, err := u.harnesses.Register(r.Context(), s.TenantID, promotion.ByKey(s.KeyID), in)
	var ge *gyre.Error
	if errors.As(err, &ge) {
		status := http.StatusBadRequest
		if ge.Code == gyre.CodeHarnessExists {
			status = http.StatusConflict
		}
		return u.showHarnesses(w, r, s, status, form, fieldMessage(ge))
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"harnesses/"+h.ID, http.StatusSeeOther)
	return nil
}

// confirmDeleteHarness is GET /ui/harnesses/{id}/delete (admins): the
// confirmation step, which says what deleting the harness does and holds
// the form that does it.
func (u *UI) confirmDeleteHarness(w http.ResponseWriter, r *http.Request, s session) error {
	if !s.Admin() {
		return errAdminOnly
	}
	h, err := u.harnessOf(r, s)
	if err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "harness-delete", view{Title: "Delete harness " + h.Name, Nav: "harnesses", Session: s, Data: h})
	return nil
}

// deleteHarness is POST /ui/harnesses/{id}/delete (admins, with the CSRF
// token): the same deletion as DELETE /api/v1/harnesses/{id} — the
// harness and its sealed key, nothing else —, then the list says so. An
// unknown or foreign id is a 404 page and deletes nothing.
func (u *UI) deleteHarness(w http.ResponseWriter, r *http.Request, s session) error {
	if !s.Admin() {
		return errAdminOnly
	}
	h, err := u.harnessOf(r, s)
	if err != nil {
		return err
	}
	if err := u.harnesses.Delete(r.Context(), s.TenantID, h.ID); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"harnesses?deleted=1", http.StatusSeeOther)
	return nil
}

// fieldMessage says which form field a refusal is about.
func fieldMessage(ge *gyre.Error) string {
	field := map[string]string{"/name": "Name", "/base_url": "Base URL", "/api_key": "API key"}[ge.Pointer]
	if field == "" {
		return ge.Message
	}
	return field + ": " + ge.Message
}

// harnessOf finds the harness the path's {id} names in the tenant.
func (u *UI) harnessOf(r *http.Request, s session) (store.Harness, error) {
	if u.harnesses == nil {
		return store.Harness{}, errNoRegistry
	}
	id, err := pathID(r)
	if err != nil {
		return store.Harness{}, err
	}
	return u.harnesses.Get(r.Context(), s.TenantID, id)
}

// harnessFilter is the sessions filter form as the user filled it in.
type harnessFilter struct {
	Query, UserID, ClientID, Since, Until string
}

type sessionsData struct {
	H      store.Harness
	Filter harnessFilter
	Cursor string
	Page   *harness.RunsPage
	// Error says why there is no page: a bad filter, or a harness that
	// failed (timeout, bad answer) — its failure, shown, not a 500.
	Error string
}

// filterQuery is the page's query string for the harness: the empty
// fields left out, as the contract has no "empty" filter.
func (f harnessFilter) values(cursor string) url.Values {
	q := url.Values{}
	for _, kv := range [][2]string{{"query", f.Query}, {"user_id", f.UserID}, {"client_id", f.ClientID},
		{"since", f.Since}, {"until", f.Until}, {"cursor", cursor}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	return q
}

// harnessSessions is GET /ui/harnesses/{id}: one page of the harness's
// GET /runs with the contract's filters.
func (u *UI) harnessSessions(w http.ResponseWriter, r *http.Request, s session) error {
	h, err := u.harnessOf(r, s)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	d := sessionsData{H: h, Cursor: q.Get("cursor"), Filter: harnessFilter{Query: q.Get("query"), UserID: q.Get("user_id"),
		ClientID: q.Get("client_id"), Since: q.Get("since"), Until: q.Get("until")}}
	status := http.StatusOK
	rq, err := harness.ParseRunsQuery(d.Filter.values(d.Cursor))
	if err == nil {
		var p harness.RunsPage
		if p, err = u.harnesses.ListRuns(r.Context(), h, rq); err == nil {
			d.Page = &p
		}
	}
	if err != nil {
		if status, d.Error, err = harnessFailure(err); err != nil {
			return err
		}
	}
	u.render(w, r, status, "harness", view{Title: "Harness " + h.Name, Nav: "harnesses", Session: s, Data: d})
	return nil
}

// harnessFailure turns a failed harness call into the status and
// message its page shows; an error that is not the harness's or the
// request's is returned for the generic error page.
func harnessFailure(err error) (int, string, error) {
	var ge *gyre.Error
	if !errors.As(err, &ge) {
		return 0, "", err
	}
	switch ge.Code {
	case gyre.CodeInvalidQuery, gyre.CodeInvalidPathParam:
		return http.StatusBadRequest, ge.Message, nil
	case gyre.CodeNotFound:
		return http.StatusNotFound, ge.Message, nil
	}
	return http.StatusBadGateway, ge.Message + " (" + string(ge.Code) + ")", nil
}

type harnessRunData struct {
	H    store.Harness
	Path string
	Run  *harness.RunView
	// Error says why the run's status is missing; TrajectoryNote why its
	// trajectory is.
	Error, TrajectoryNote string
	Trajectory            *trajectoryView
}

func harnessRunPath(harnessID, runID string) string {
	return Prefix + "harnesses/" + harnessID + "/runs/" + url.PathEscape(runID)
}

// harnessRun is GET /ui/harnesses/{id}/runs/{run}: the run's status from
// the harness and its trajectory in the ATIF viewer.
func (u *UI) harnessRun(w http.ResponseWriter, r *http.Request, s session) error {
	h, err := u.harnessOf(r, s)
	if err != nil {
		return err
	}
	runID := r.PathValue("run")
	d := harnessRunData{H: h, Path: harnessRunPath(h.ID, runID)}
	status := http.StatusOK
	v, err := u.harnesses.Run(r.Context(), h, runID)
	if err != nil {
		if status, d.Error, err = harnessFailure(err); err != nil {
			return err
		}
	} else {
		d.Run = &v
	}
	if d.Run != nil {
		p, err := u.harnessTrajectory(r, s, h, runID)
		switch {
		case err != nil:
			_, msg, ferr := harnessFailure(err)
			if ferr != nil {
				return ferr
			}
			d.TrajectoryNote = "No trajectory: " + msg
		default:
			page := pageOfSteps(p.T, 0)
			if page.Next > 0 {
				page.MoreURL = d.Path + "/steps?from=" + strconv.Itoa(page.Next)
			}
			d.Trajectory = &trajectoryView{Head: headOf(p.T), Invalid: p.Invalid, Size: p.Size, Page: page}
		}
	}
	u.render(w, r, status, "harness-run", view{Title: "Session " + runID, Nav: "harnesses", Session: s, Data: d})
	return nil
}

// harnessTrajectory fetches a harness run's trajectory and parses it; a
// document that is no JSON object is the harness's bad answer.
func (u *UI) harnessTrajectory(r *http.Request, s session, h store.Harness, runID string) (*parsedTrajectory, error) {
	sp, err := u.harnesses.Trajectory(r.Context(), h, runID)
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	key := "harness/" + s.TenantID + "/" + sp.SHA256()
	if p := u.trajectories.get(key); p != nil {
		return p, nil
	}
	data, err := sp.Bytes()
	if err != nil {
		return nil, err
	}
	p, err := readTrajectory(data)
	if err != nil {
		return nil, gyre.Errorf(gyre.CodeHarnessInvalidResponse, "harness %q sent a trajectory that is not an ATIF document", h.Name)
	}
	u.trajectories.put(key, p)
	return p, nil
}

// harnessRunSteps is GET /ui/harnesses/{id}/runs/{run}/steps?from=N: the
// next page of the trajectory's steps, an htmx fragment.
func (u *UI) harnessRunSteps(w http.ResponseWriter, r *http.Request, s session) error {
	h, err := u.harnessOf(r, s)
	if err != nil {
		return err
	}
	runID := r.PathValue("run")
	from, err := strconv.Atoi(r.URL.Query().Get("from"))
	if err != nil || from < 0 {
		return badRequest("from must be the index of a step, not %q.", r.URL.Query().Get("from"))
	}
	p, err := u.harnessTrajectory(r, s, h, runID)
	if err != nil {
		_, msg, ferr := harnessFailure(err)
		if ferr != nil {
			return ferr
		}
		return &pageError{http.StatusBadGateway, msg}
	}
	if from >= len(p.T.Steps) {
		return badRequest("The trajectory has %d steps; there is no step at index %d.", len(p.T.Steps), from)
	}
	page := pageOfSteps(p.T, from)
	if page.Next > 0 {
		page.MoreURL = harnessRunPath(h.ID, runID) + "/steps?from=" + strconv.Itoa(page.Next)
	}
	u.render(w, r, http.StatusOK, "steps-fragment", view{Session: s, Data: page})
	return nil
}
