package api

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// harnessRoutes registers the harness registry and the sessions browser's
// calls to a registered harness (SPEC §4.8, §7.3).
func (s *Server) harnessRoutes() {
	s.handle("POST /api/v1/harnesses", adminOnly, s.createHarness)
	s.handle("GET /api/v1/harnesses", reader, s.listHarnesses)
	s.handle("GET /api/v1/harnesses/{id}", reader, s.getHarness)
	s.handle("DELETE /api/v1/harnesses/{id}", adminOnly, s.deleteHarness)
	s.handle("GET /api/v1/harnesses/{id}/capabilities", reader, s.harnessCapabilities)
	s.handle("GET /api/v1/harnesses/{id}/runs", reader, s.harnessRuns)
	s.handle("GET /api/v1/harnesses/{id}/runs/{run_id}", reader, s.harnessRun)
	s.handle("GET /api/v1/harnesses/{id}/runs/{run_id}/trajectory", reader, s.harnessTrajectory)
}

// harnessView is a registered harness as the API shows it. The key is
// never shown: only whether there is one.
type harnessView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	BaseURL   string    `json:"base_url"`
	HasAPIKey bool      `json:"has_api_key"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

func toHarnessView(h store.Harness) harnessView {
	return harnessView{ID: h.ID, Name: h.Name, BaseURL: h.BaseURL, HasAPIKey: h.APIKeySealed != nil,
		CreatedAt: h.CreatedAt, CreatedBy: h.CreatedBy}
}

// createHarness is POST /api/v1/harnesses: 201 when registered, 200 when
// the same harness was, 409 harness_exists when the name has another URL
// or key.
func (s *Server) createHarness(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body harness.Input
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	h, created, err := s.harnesses.Register(r.Context(), p.TenantID, promotion.ByKey(p.KeyID), body)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toHarnessView(h))
	return nil
}

// listHarnesses is GET /api/v1/harnesses, by name.
func (s *Server) listHarnesses(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	hs, next, err := s.harnesses.List(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]harnessView, 0, len(hs))
	for _, h := range hs {
		items = append(items, toHarnessView(h))
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// harnessOf finds the harness the path's {id} names in the caller's
// tenant.
func (s *Server) harnessOf(r *http.Request) (store.Harness, error) {
	p, err := principal(r)
	if err != nil {
		return store.Harness{}, err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return store.Harness{}, err
	}
	h, err := s.harnesses.Get(r.Context(), p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Harness{}, gyre.Errorf(gyre.CodeNotFound, "no harness %s in this tenant", id)
	}
	return h, err
}

// getHarness is GET /api/v1/harnesses/{id}.
func (s *Server) getHarness(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toHarnessView(h))
	return nil
}

// deleteHarness is DELETE /api/v1/harnesses/{id}: 204, the sealed key
// gone with it.
func (s *Server) deleteHarness(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	if err := s.harnesses.Delete(r.Context(), h.TenantID, h.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return gyre.Errorf(gyre.CodeNotFound, "no harness %s in this tenant", h.ID)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// harnessCapabilities is GET /api/v1/harnesses/{id}/capabilities: the
// harness's own answer, fetched now.
func (s *Server) harnessCapabilities(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	raw, err := s.harnesses.Capabilities(r.Context(), h)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, raw)
	return nil
}

// harnessRuns is GET /api/v1/harnesses/{id}/runs: one page of the
// harness's GET /runs with the contract's filters.
func (s *Server) harnessRuns(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return gyre.Errorf(gyre.CodeInvalidQuery, "the query string is malformed")
	}
	rq, err := harness.ParseRunsQuery(q)
	if err != nil {
		return err
	}
	page, err := s.harnesses.ListRuns(r.Context(), h, rq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// harnessRun is GET /api/v1/harnesses/{id}/runs/{run_id}.
func (s *Server) harnessRun(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	v, err := s.harnesses.Run(r.Context(), h, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// harnessTrajectory is GET /api/v1/harnesses/{id}/runs/{run_id}/trajectory:
// the harness's ATIF document as it sent it, once it was whole, bounded
// and one JSON object.
func (s *Server) harnessTrajectory(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harnessOf(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	sp, err := s.harnesses.Trajectory(r.Context(), h, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	defer sp.Close()
	rd, err := sp.Reader()
	if err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.FormatInt(sp.Size(), 10))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rd)
	return nil
}
