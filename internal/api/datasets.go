package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/store"
)

// datasetRoutes registers datasets (SPEC §9): an admin creates one; readers
// list them and download their files and manifests.
func (s *Server) datasetRoutes() {
	s.handle("POST /api/v1/datasets", adminOnly, s.createDataset)
	s.handle("GET /api/v1/datasets", reader, s.listDatasets)
	s.handle("GET /api/v1/datasets/{id}", reader, s.getDataset)
	s.handle("GET /api/v1/datasets/{id}/file", reader, s.getDatasetFile)
	s.handle("GET /api/v1/datasets/{id}/manifest", reader, s.getDatasetManifest)
}

// newDatasetJSON is the body of POST /api/v1/datasets. Times are RFC 3339
// strings bounding the rollouts' submission time.
type newDatasetJSON struct {
	AgentID        string   `json:"agent_id"`
	Format         string   `json:"format"`
	Since          *string  `json:"since"`
	Until          *string  `json:"until"`
	MinReward      *float64 `json:"min_reward"`
	MinMargin      *float64 `json:"min_margin"`
	BatchIDs       []string `json:"batch_ids"`
	IncludeHoldout *bool    `json:"include_holdout"`
}

// DatasetJSON is a dataset as the API shows it (and gyre dataset list and
// show print it on the store directly).
type DatasetJSON struct {
	ID               string          `json:"id"`
	State            string          `json:"state"`
	Reason           *string         `json:"reason"`
	AgentID          string          `json:"agent_id"`
	Format           string          `json:"format"`
	Filters          json.RawMessage `json:"filters"`
	RolloutsSelected int             `json:"rollouts_selected"`
	FileSHA256       *string         `json:"file_sha256"`
	FileBytes        *int64          `json:"file_bytes"`
	CreatedAt        time.Time       `json:"created_at"`
	BuiltAt          *time.Time      `json:"built_at"`
	// Progress is how far the latest build got; null until one starts.
	Progress *DatasetProgressJSON `json:"progress"`
	Manifest json.RawMessage      `json:"manifest"`
}

// DatasetProgressJSON is a build's progress: the frozen rollouts read and
// the rows written so far (the final counts once ready).
type DatasetProgressJSON struct {
	RolloutsRead int64 `json:"rollouts_read"`
	RowsWritten  int64 `json:"rows_written"`
}

// NewDatasetJSON is d as the API shows it.
func NewDatasetJSON(d store.Dataset) DatasetJSON {
	m := d.Manifest
	if m == nil {
		m = json.RawMessage("null")
	}
	var p *DatasetProgressJSON
	if d.Progress != nil {
		p = &DatasetProgressJSON{RolloutsRead: d.Progress.Rollouts, RowsWritten: d.Progress.Rows}
	}
	return DatasetJSON{ID: d.ID, State: d.State, Reason: d.Reason, AgentID: d.AgentID, Format: d.Format,
		Filters: d.Filters, RolloutsSelected: d.Members, FileSHA256: d.FileSHA256, FileBytes: d.FileBytes,
		CreatedAt: d.CreatedAt, BuiltAt: d.BuiltAt, Progress: p, Manifest: m}
}

// createDataset is POST /api/v1/datasets: it freezes the selection (the
// rollout ids and the verdict set each was graded with) and queues the
// durable build. A selection of nothing is built at once: 201 ready, with
// 0 rows and a manifest that says why.
func (s *Server) createDataset(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body newDatasetJSON
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	f := dataset.Filters{MinReward: body.MinReward, MinMargin: body.MinMargin, BatchIDs: body.BatchIDs}
	if body.IncludeHoldout != nil {
		f.IncludeHoldout = *body.IncludeHoldout
	}
	for _, t := range []struct {
		ptr string
		in  *string
		out **time.Time
	}{{"/since", body.Since, &f.Since}, {"/until", body.Until, &f.Until}} {
		if t.in == nil {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, *t.in)
		if err != nil {
			return gyre.Errorf(gyre.CodeInvalidBody, "%s must be an RFC 3339 time", strings.TrimPrefix(t.ptr, "/")).AtPointer(t.ptr)
		}
		*t.out = &v
	}
	d, err := build.Create(r.Context(), s.store, p.TenantID, build.Request{AgentID: body.AgentID,
		Format: dataset.Format(body.Format), Filters: f})
	if err != nil {
		return err
	}
	if d.Members == 0 {
		// Nothing to read: build now, so the answer is already ready. A
		// failure here leaves the job to the builder.
		if err := s.datasets.Build(r.Context(), d.ID); err == nil {
			if built, err := s.store.GetDataset(r.Context(), p.TenantID, d.ID); err == nil {
				d = built
			}
		}
	} else {
		s.datasets.Wake()
	}
	w.Header().Set("Location", "/api/v1/datasets/"+d.ID)
	writeJSON(w, http.StatusCreated, NewDatasetJSON(d))
	return nil
}

// listDatasets is GET /api/v1/datasets: the tenant's datasets, newest
// first.
func (s *Server) listDatasets(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	list, next, err := s.store.ListDatasets(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]DatasetJSON, len(list))
	for i, d := range list {
		items[i] = NewDatasetJSON(d)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// datasetOf reads the path's dataset in the caller's tenant.
func (s *Server) datasetOf(r *http.Request) (store.Dataset, error) {
	p, err := principal(r)
	if err != nil {
		return store.Dataset{}, err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return store.Dataset{}, err
	}
	if _, err := queryParams(r); err != nil {
		return store.Dataset{}, err
	}
	d, err := s.store.GetDataset(r.Context(), p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Dataset{}, gyre.Errorf(gyre.CodeNotFound, "no dataset %s in this tenant", id)
	}
	return d, err
}

// getDataset is GET /api/v1/datasets/{id}.
func (s *Server) getDataset(w http.ResponseWriter, r *http.Request) error {
	d, err := s.datasetOf(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, NewDatasetJSON(d))
	return nil
}

// notReady is the 409 of a dataset's file or manifest before it is built.
func notReady(d store.Dataset) error {
	if d.State == store.DatasetFailed {
		reason := ""
		if d.Reason != nil {
			reason = ": " + *d.Reason
		}
		return gyre.Errorf(gyre.CodeConflict, "dataset %s failed to build%s", d.ID, reason)
	}
	return gyre.Errorf(gyre.CodeConflict, "dataset %s is still building; GET /api/v1/datasets/%s says when it is ready", d.ID, d.ID)
}

// getDatasetFile is GET /api/v1/datasets/{id}/file: the file, streamed
// from the blob store and checked against its SHA-256 as it goes, with
// that SHA-256 as a strong ETag. 409 while building or failed.
func (s *Server) getDatasetFile(w http.ResponseWriter, r *http.Request) error {
	d, err := s.datasetOf(r)
	if err != nil {
		return err
	}
	if d.State != store.DatasetReady || d.BlobKey == nil || d.FileSHA256 == nil || d.FileBytes == nil {
		return notReady(d)
	}
	if s.blobs == nil {
		return errNoBodies
	}
	etag := `"` + *d.FileSHA256 + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, no-cache")
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	rc, err := s.blobs.GetContent(r.Context(), *d.BlobKey, *d.FileSHA256)
	if err != nil {
		return fmt.Errorf("dataset %s file: %w", d.ID, err)
	}
	defer rc.Close()
	h.Set("Content-Type", "application/jsonl; charset=utf-8")
	h.Set("Content-Length", strconv.FormatInt(*d.FileBytes, 10))
	h.Set("Content-Disposition", `attachment; filename="`+d.ID+"."+d.Format+`.jsonl"`)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The status is out: cut the response short so the client sees
		// a truncated body, never a complete-looking wrong one.
		s.log.Error("dataset file stream", "dataset_id", d.ID, "error", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// etagMatches reports whether an If-None-Match header lists etag (or *).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// getDatasetManifest is GET /api/v1/datasets/{id}/manifest. 409 while
// building or failed.
func (s *Server) getDatasetManifest(w http.ResponseWriter, r *http.Request) error {
	d, err := s.datasetOf(r)
	if err != nil {
		return err
	}
	if d.State != store.DatasetReady || d.Manifest == nil {
		return notReady(d)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if d.FileSHA256 != nil {
		h.Set("ETag", `"`+*d.FileSHA256+`.manifest"`)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(d.Manifest, '\n'))
	return nil
}
