package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// suiteCreatedJSON is the answer of POST /api/v1/suites.
type suiteCreatedJSON struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Cases         int    `json:"cases"`
	ContentSHA256 string `json:"content_sha256"`
}

// suiteVersionJSON is one version of a suite in GET /api/v1/suites.
type suiteVersionJSON struct {
	Version       string    `json:"version"`
	ContentSHA256 string    `json:"content_sha256"`
	Cases         int       `json:"cases"`
	CreatedAt     time.Time `json:"created_at"`
}

// suiteJSON is a suite in GET /api/v1/suites: its name, its latest
// version and every version, latest first.
type suiteJSON struct {
	Name          string             `json:"name"`
	LatestVersion string             `json:"latest_version"`
	Versions      []suiteVersionJSON `json:"versions"`
}

// suiteDocumentJSON is GET /api/v1/suites/{name}/versions/{version}.
type suiteDocumentJSON struct {
	Name          string          `json:"name"`
	Version       string          `json:"version"`
	ContentSHA256 string          `json:"content_sha256"`
	Cases         int             `json:"cases"`
	CreatedAt     time.Time       `json:"created_at"`
	Document      json.RawMessage `json:"document"`
}

// createSuite is POST /api/v1/suites: a suite document (SPEC §7.1) as
// JSON, YAML or JSONL (with ?name=) by Content-Type. Each fixture a case
// names resolves to the latest revision in the tenant's registry at upload
// time, and its digest is part of the version's content hash. 201 for a
// new version, 200 when the same content was uploaded before (it becomes
// the suite's latest again); the same explicit version with other content
// is 409 suite_version_conflict.
func (s *Server) createSuite(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return gyre.Errorf(gyre.CodeUnsupportedMedia, "send the suite with a Content-Type: application/json, application/yaml or application/jsonl")
	}
	format, err := suite.FormatFromContentType(ct)
	if err != nil {
		return gyre.Errorf(gyre.CodeUnsupportedMedia, "Content-Type must be application/json, application/yaml (or application/x-yaml, text/yaml) or application/jsonl (or application/x-ndjson)")
	}
	q, err := queryParams(r, "name")
	if err != nil {
		return err
	}
	name, hasName := q["name"]
	switch {
	case format == suite.FormatJSONL && !suite.ValidName(name):
		return gyre.Errorf(gyre.CodeInvalidQuery, "a JSONL suite takes its name from ?name=, a name of 1 to 255 characters from A-Z a-z 0-9 . _ -")
	case format != suite.FormatJSONL && hasName:
		return gyre.Errorf(gyre.CodeInvalidQuery, "?name= is only for JSONL suites: a JSON or YAML suite names itself")
	}
	raw, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	// ResolveFixture cannot fail, so a store error is kept aside, the
	// name reported missing, and the error returned once Parse is done.
	var resolveErr error
	resolve := func(fixture string) (string, bool) {
		if resolveErr != nil {
			return "", false
		}
		fx, err := s.store.LatestFixture(r.Context(), p.TenantID, fixture)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", false
		case err != nil:
			resolveErr = fmt.Errorf("resolve fixture: %w", err)
			return "", false
		}
		return fx.SHA256, true
	}
	allowsCommand, err := s.commandAllower(r.Context(), p.TenantID)
	if err != nil {
		return err
	}
	st, err := suite.Parse(raw, format, suite.Options{
		Name:           name,
		ResolveFixture: resolve,
		AllowCommand:   allowsCommand,
	})
	if resolveErr != nil {
		return resolveErr
	}
	if err != nil {
		var ge *gyre.Error
		if errors.As(err, &ge) {
			return err
		}
		return fmt.Errorf("parse suite: %w", err)
	}
	v, created, err := s.store.PutSuiteVersion(r.Context(), store.NewSuiteVersion{
		TenantID:      p.TenantID,
		Name:          st.Name,
		Version:       st.VersionID(),
		ContentSHA256: st.ContentHash,
		Document:      st.Document,
		Cases:         len(st.Cases),
		Fixtures:      st.Fixtures,
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		return gyre.Errorf(gyre.CodeSuiteVersionConflict,
			"suite %q already has a version %q with other content: change the version or leave it out to version by content hash",
			st.Name, st.VersionID()).AtPointer("/version")
	case errors.Is(err, store.ErrNotFound):
		// The revisions were read moments ago and are never deleted; only
		// a vanished tenant gets here.
		return gyre.Errorf(gyre.CodeFixtureMissing, "a fixture revision this suite references is no longer stored; upload the suite again")
	case err != nil:
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/api/v1/suites/"+url.PathEscape(v.Name)+"/versions/"+url.PathEscape(v.Version))
	writeJSON(w, status, suiteCreatedJSON{Name: v.Name, Version: v.Version, Cases: v.Cases, ContentSHA256: v.ContentSHA256})
	return nil
}

// listSuites is GET /api/v1/suites: the tenant's suites by name, each with
// its versions, latest first.
func (s *Server) listSuites(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	suites, next, err := s.store.ListSuites(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]suiteJSON, len(suites))
	for i, st := range suites {
		items[i] = suiteJSON{Name: st.Name, Versions: make([]suiteVersionJSON, len(st.Versions))}
		for j, v := range st.Versions {
			items[i].Versions[j] = suiteVersionJSON{Version: v.Version, ContentSHA256: v.ContentSHA256, Cases: v.Cases, CreatedAt: v.CreatedAt}
		}
		if len(st.Versions) > 0 {
			items[i].LatestVersion = st.Versions[0].Version
		}
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// getSuiteVersion is GET /api/v1/suites/{name}/versions/{version}: the
// version's normalized document, with the digest of every fixture it
// references.
func (s *Server) getSuiteVersion(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	version, err := pathName(r, "version")
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	v, err := s.store.SuiteVersion(r.Context(), p.TenantID, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return gyre.Errorf(gyre.CodeNotFound, "suite %q has no version %q in this tenant", name, version)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, suiteDocumentJSON{
		Name: v.Name, Version: v.Version, ContentSHA256: v.ContentSHA256, Cases: v.Cases,
		CreatedAt: v.CreatedAt, Document: v.Document,
	})
	return nil
}

// parseStoredSuite reads a stored version's normalized document back into
// a suite. The document is a valid suite once its fixture map (name →
// digest) is taken out and used as the fixture resolver; its hash must
// come out the same, or the stored version is not what gyre would run.
func parseStoredSuite(v store.SuiteVersion) (*suite.Suite, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(v.Document, &doc); err != nil {
		return nil, fmt.Errorf("suite %s version %s: decode document: %w", v.Name, v.Version, err)
	}
	var fixtures map[string]string
	if raw, ok := doc["fixtures"]; ok {
		if err := json.Unmarshal(raw, &fixtures); err != nil {
			return nil, fmt.Errorf("suite %s version %s: decode fixtures: %w", v.Name, v.Version, err)
		}
		delete(doc, "fixtures")
	}
	src, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("suite %s version %s: %w", v.Name, v.Version, err)
	}
	st, err := suite.Parse(src, suite.FormatJSON, suite.Options{
		ResolveFixture: func(name string) (string, bool) {
			sum, ok := fixtures[name]
			return sum, ok
		},
	})
	if err != nil {
		// %v, not %w: the stored document is gyre's own, so its problem is
		// an internal error, never the client's 422 the suite error carries.
		return nil, fmt.Errorf("suite %s version %s: parse stored document: %v", v.Name, v.Version, err)
	}
	if st.ContentHash != v.ContentSHA256 {
		return nil, fmt.Errorf("suite %s version %s: stored document hashes to %s, not %s", v.Name, v.Version, st.ContentHash, v.ContentSHA256)
	}
	return st, nil
}
