package api

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store"
)

// fixtureJSON is a fixture revision as the API shows it.
type fixtureJSON struct {
	Name      string `json:"name"`
	SHA256    string `json:"sha256"`
	SizeBytes int64  `json:"size_bytes"`
}

// fixtureListItem is a fixture name's latest revision in GET
// /api/v1/fixtures.
type fixtureListItem struct {
	fixtureJSON
	CreatedAt time.Time `json:"created_at"`
}

var errNoBlobStore = gyre.Errorf(gyre.CodeUnavailable, "this server has no blob store configured for fixtures")

// putFixture is PUT /api/v1/fixtures/{name}: the raw body becomes a
// revision of the fixture. The bytes stream to the blob store under
// fixtures/<tenant_id>/<sha256> — never a key built from the name, which
// lives only in the database. 201 when the (name, sha256) revision is new,
// 200 when it existed; either way it becomes the name's latest revision.
// Suite versions keep the revisions they were uploaded with.
func (s *Server) putFixture(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	if s.blobs == nil {
		return errNoBlobStore
	}
	body, err := streamBody(r, s.cfg.MaxBlobBytes)
	if err != nil {
		return err
	}
	defer body.Close()
	sha, size, err := s.blobs.PutContent(r.Context(), blobstore.FixturePrefix+"/"+p.TenantID, body)
	if err != nil {
		return err
	}
	f, created, err := s.store.PutFixture(r.Context(), store.NewFixture{
		TenantID: p.TenantID, Name: name, SHA256: sha, SizeBytes: size,
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, fixtureJSON{Name: f.Name, SHA256: f.SHA256, SizeBytes: f.SizeBytes})
	return nil
}

// listFixtures is GET /api/v1/fixtures: the latest revision of every
// fixture name of the tenant, by name.
func (s *Server) listFixtures(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	fixtures, next, err := s.store.ListFixtures(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]fixtureListItem, len(fixtures))
	for i, f := range fixtures {
		items[i] = fixtureListItem{fixtureJSON{f.Name, f.SHA256, f.SizeBytes}, f.CreatedAt}
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// getFixtureContent is GET /api/fixtures/{name}[?sha256=]: the bytes of
// the fixture's latest revision, or of the revision given, to keys of the
// tenant. The bytes are checked against their digest as they stream; on a
// mismatch the response is cut short (it never completes with wrong bytes).
func (s *Server) getFixtureContent(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	q, err := queryParams(r, "sha256")
	if err != nil {
		return err
	}
	var f store.Fixture
	if sha, ok := q["sha256"]; ok {
		if !blobstore.ValidSHA256(sha) {
			return gyre.Errorf(gyre.CodeInvalidQuery, "sha256 must be a lowercase hex SHA-256")
		}
		f, err = s.store.FixtureRevision(r.Context(), p.TenantID, name, sha)
		if errors.Is(err, store.ErrNotFound) {
			return gyre.Errorf(gyre.CodeNotFound, "fixture %q has no revision %s in this tenant", name, sha)
		}
	} else {
		f, err = s.store.LatestFixture(r.Context(), p.TenantID, name)
		if errors.Is(err, store.ErrNotFound) {
			return gyre.Errorf(gyre.CodeNotFound, "no fixture %q in this tenant", name)
		}
	}
	if err != nil {
		return err
	}
	if s.blobs == nil {
		return errNoBlobStore
	}
	key, err := blobstore.FixtureKey(p.TenantID, f.SHA256)
	if err != nil {
		return err
	}
	rc, err := s.blobs.GetContent(r.Context(), key, f.SHA256)
	if err != nil {
		return err // a registered revision without its blob is an internal error
	}
	defer rc.Close()

	raw, err := hex.DecodeString(f.SHA256)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(f.SizeBytes, 10))
	// The name follows the name grammar, so it needs no quoting rules.
	h.Set("Content-Disposition", `attachment; filename="`+f.Name+`"`)
	h.Set("ETag", `"`+f.SHA256+`"`)
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(raw)+":")
	h.Set("Cache-Control", "private, no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if err := copyHoldingLast(w, rc); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "fixture content cut short",
			slog.String("request_id", infoFrom(r.Context()).id),
			slog.String("sha256", f.SHA256),
			slog.Any("error", err))
		// Abort the connection: the client sees a truncated body, never
		// a complete one with wrong bytes.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// copyHoldingLast copies r to w, always holding back the last chunk read
// until the next read succeeds, so that an error reported with the final
// bytes (a digest mismatch found at EOF) keeps them from being written.
func copyHoldingLast(w io.Writer, r io.Reader) error {
	const size = 32 << 10
	bufs := [2][]byte{make([]byte, size), make([]byte, size)}
	var pending []byte
	cur := 0
	for {
		n, err := r.Read(bufs[cur])
		if n > 0 {
			if pending != nil {
				if _, werr := w.Write(pending); werr != nil {
					return werr
				}
			}
			pending = bufs[cur][:n]
			cur ^= 1
		}
		if errors.Is(err, io.EOF) {
			if pending != nil {
				if _, werr := w.Write(pending); werr != nil {
					return werr
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// streamBody returns r's body for streaming, undoing a gzip
// Content-Encoding with the same cap on the decompressed size as on the
// body itself (the body's own cap is bodyLimit's). Its read errors are
// API errors: 413 over the cap, 422 for corrupt gzip.
func streamBody(r *http.Request, max int64) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return nil, errBodyTooLarge(max)
			}
			return nil, gyre.Errorf(gyre.CodeInvalidBody, "body is not valid gzip")
		}
		return &gunzipBody{zr: zr, body: r.Body, max: max}, nil
	default:
		return nil, gyre.Errorf(gyre.CodeUnsupportedMedia, "Content-Encoding %q is not supported: send identity or gzip", enc)
	}
}

// gunzipBody decompresses a request body, failing once it yields more
// than max bytes.
type gunzipBody struct {
	zr   *gzip.Reader
	body io.Closer
	max  int64
	n    int64
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	g.n += int64(n)
	if g.n > g.max {
		return 0, errBodyTooLarge(g.max)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.As(err, &tooLarge):
		return n, err
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader), errors.Is(err, io.ErrUnexpectedEOF):
		return n, gyre.Errorf(gyre.CodeInvalidBody, "body is not valid gzip or was cut short")
	}
	return n, err
}

func (g *gunzipBody) Close() error {
	zerr := g.zr.Close()
	if err := g.body.Close(); err != nil {
		return err
	}
	return zerr
}
