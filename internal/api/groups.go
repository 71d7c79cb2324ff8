package api

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/gateway"
)

// groupRoutes registers following a running batch group by group (SPEC
// §9): an asynchronous RL trainer reads each group once it completes.
func (s *Server) groupRoutes() {
	s.handle("GET /api/v1/batches/{id}/groups", reader, s.batchGroups)
}

// batchGroups is GET /api/v1/batches/{id}/groups?complete=true[&after=&limit=]:
// JSONL, one line per completed group of the batch (dataset.GroupLine
// with its "sequence" first), in completion sequence order, the groups
// whose sequence is greater than after, at most limit of them.
func (s *Server) batchGroups(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	q, err := queryParams(r, "complete", "after", "limit")
	if err != nil {
		return err
	}
	if q["complete"] != "true" {
		return gyre.Errorf(gyre.CodeInvalidQuery, "complete must be true: only completed groups are served")
	}
	var after int64
	if v, ok := q["after"]; ok {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return gyre.Errorf(gyre.CodeInvalidQuery, "after must be a group sequence: an integer from 0")
		}
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	groups, err := s.store.CompletedGroups(r.Context(), p.TenantID, id, after, pg.Limit)
	if err != nil {
		return err
	}
	var blobs gateway.BlobReader
	if s.blobs != nil {
		blobs = s.blobs
	}
	line := func(i int) ([]byte, error) {
		g := groups[i]
		rs, err := build.GroupRollouts(r.Context(), s.store, blobs, p.TenantID, id, g.GroupID)
		if err != nil {
			return nil, err
		}
		b, err := dataset.GroupLine(rs)
		if err != nil {
			return nil, err
		}
		// GroupLine is one JSON object: put the sequence first.
		out := append([]byte(`{"sequence":`+strconv.FormatInt(g.Seq, 10)+`,`), bytes.TrimPrefix(b, []byte("{"))...)
		return append(out, '\n'), nil
	}
	// The first line is read before the status is out, so a store fault
	// is an error response; a later one cuts the body short.
	var first []byte
	if len(groups) > 0 {
		if first, err = line(0); err != nil {
			return err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/jsonl; charset=utf-8")
	h.Set("Cache-Control", "private, no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if first == nil {
		return nil
	}
	if _, err := w.Write(first); err != nil {
		return nil // the client went away
	}
	for i := 1; i < len(groups); i++ {
		b, err := line(i)
		if err != nil {
			s.log.Error("batch groups stream", "batch_id", id, "group_id", groups[i].GroupID, "error", err)
			panic(http.ErrAbortHandler)
		}
		if _, err := w.Write(b); err != nil {
			return nil
		}
	}
	return nil
}
