package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store"
)

// Recorder persists experiments: into the embedded store (StoreRecorder)
// or into a running gyre serve through its API (RemoteRecorder, SPEC
// §7.5). Implementations are safe for concurrent use.
type Recorder interface {
	// CreateExperiment stores a new experiment; e.TenantID is the
	// recorder's own.
	CreateExperiment(ctx context.Context, e store.NewExperiment) (store.Experiment, error)
	// Experiment reads one experiment; store.ErrNotFound if unknown.
	Experiment(ctx context.Context, id string) (store.Experiment, error)
	// Runs reads every run record of an experiment, by case, then
	// repetition.
	Runs(ctx context.Context, experimentID string) ([]store.RunRecord, error)
	// AllRuns yields the same records one page at a time, so that a
	// report over them holds one page, never every record. A failure
	// is yielded as the last error.
	AllRuns(ctx context.Context, experimentID string) iter.Seq2[store.RunRecord, error]
	// PutRun writes one run record (idempotent); r.TenantID is the
	// recorder's own.
	PutRun(ctx context.Context, r store.RunRecord) error
	// PutBlob stores the spool's bytes as a content-addressed blob before
	// any record refers to it. A record that refers to blobs lists them in
	// RunRecord.Blobs.
	PutBlob(ctx context.Context, s *Spool) error
	// Finish records the experiment's model and summary.
	Finish(ctx context.Context, id, model string, summary json.RawMessage) error
}

// ErrBlobTooLarge is a blob the recorder refuses for its size (a gyre
// server's body limit). The run is recorded without it.
var ErrBlobTooLarge = errors.New("blob too large for the recorder")

// StoreRecorder records into the embedded store and blob store, for one
// tenant.
type StoreRecorder struct {
	Store  store.Store
	Blobs  *blobstore.Store
	Tenant string
}

var _ Recorder = (*StoreRecorder)(nil)

// CreateExperiment stores a new experiment.
func (r *StoreRecorder) CreateExperiment(ctx context.Context, e store.NewExperiment) (store.Experiment, error) {
	e.TenantID = r.Tenant
	return r.Store.CreateExperiment(ctx, e)
}

// Experiment reads one experiment.
func (r *StoreRecorder) Experiment(ctx context.Context, id string) (store.Experiment, error) {
	return r.Store.Experiment(ctx, r.Tenant, id)
}

// Runs reads every run record of an experiment.
func (r *StoreRecorder) Runs(ctx context.Context, experimentID string) ([]store.RunRecord, error) {
	return collectRuns(r.AllRuns(ctx, experimentID))
}

// AllRuns yields every run record of an experiment, a page at a time.
func (r *StoreRecorder) AllRuns(ctx context.Context, experimentID string) iter.Seq2[store.RunRecord, error] {
	return pagedRuns(func(cursor string) ([]store.RunRecord, string, error) {
		return r.Store.ListRuns(ctx, r.Tenant, experimentID, store.Page{Limit: runPage, Cursor: cursor})
	})
}

// runPage is how many run records are read at a time.
const runPage = 500

// pagedRuns yields the records of the pages page returns, from the
// first cursor "" until a page has no next cursor.
func pagedRuns(page func(cursor string) ([]store.RunRecord, string, error)) iter.Seq2[store.RunRecord, error] {
	return func(yield func(store.RunRecord, error) bool) {
		cursor := ""
		for {
			runs, next, err := page(cursor)
			if err != nil {
				yield(store.RunRecord{}, err)
				return
			}
			for _, r := range runs {
				if !yield(r, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

// collectRuns gathers what runs yields.
func collectRuns(runs iter.Seq2[store.RunRecord, error]) ([]store.RunRecord, error) {
	var out []store.RunRecord
	for r, err := range runs {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// PutRun writes one run record.
func (r *StoreRecorder) PutRun(ctx context.Context, rec store.RunRecord) error {
	rec.TenantID = r.Tenant
	_, err := r.Store.PutRun(ctx, rec)
	return err
}

// PutBlob stores the spool under blobs/<tenant>/<sha256> unless it is
// there already. The store records the blob for the tenant together with
// the run record that lists it in Blobs, in one write.
func (r *StoreRecorder) PutBlob(ctx context.Context, s *Spool) error {
	if r.Blobs == nil {
		return errors.New("no blob store")
	}
	sum := s.SHA256()
	key, err := blobstore.KeyFor(BlobPrefix(r.Tenant), sum)
	if err != nil {
		return err
	}
	ok, err := r.Blobs.Exists(ctx, key)
	if err != nil {
		return fmt.Errorf("put blob: %w", err)
	}
	if !ok {
		rd, err := s.Reader()
		if err != nil {
			return err
		}
		got, _, err := r.Blobs.PutContent(ctx, BlobPrefix(r.Tenant), rd)
		if err != nil {
			return fmt.Errorf("put blob: %w", err)
		}
		if got != sum {
			return fmt.Errorf("put blob: stored %s, want %s", got, sum)
		}
	}
	return nil
}

// Finish records the experiment's model and summary.
func (r *StoreRecorder) Finish(ctx context.Context, id, model string, summary json.RawMessage) error {
	_, err := r.Store.FinishExperiment(ctx, store.ExperimentFinish{TenantID: r.Tenant, ID: id, Model: model, Summary: summary})
	return err
}

// RemoteRecorder records into a running gyre serve through its API with
// an evaluator key (SPEC §7.5). It never sends a harness key.
type RemoteRecorder struct {
	base *url.URL
	key  string
	hc   *http.Client
}

var _ Recorder = (*RemoteRecorder)(nil)

// NewRemoteRecorder returns a recorder for the gyre server at baseURL.
func NewRemoteRecorder(baseURL, key string, hc *http.Client) (*RemoteRecorder, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server url %q: want http:// or https://host", baseURL)
	}
	if key == "" {
		return nil, errors.New("recording into a server needs an evaluator key (--key)")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Minute}
	}
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &RemoteRecorder{base: u, key: key, hc: &c}, nil
}

// apiError is gyre's error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Pointer string `json:"pointer"`
	} `json:"error"`
}

// ServerError is an answer of the gyre server other than success.
type ServerError struct {
	Op      string
	Status  int
	Code    string
	Message string
	// Pointer is the JSON pointer of the body member at fault, "" when
	// the answer named none.
	Pointer string
}

// Error describes the failed call.
func (e *ServerError) Error() string {
	if e.Code != "" && e.Pointer != "" {
		return fmt.Sprintf("%s: gyre server answered %d %s at %s: %s", e.Op, e.Status, e.Code, e.Pointer, e.Message)
	}
	if e.Code != "" {
		return fmt.Sprintf("%s: gyre server answered %d %s: %s", e.Op, e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("%s: gyre server answered %d", e.Op, e.Status)
}

// Is makes a 404 match store.ErrNotFound.
func (e *ServerError) Is(target error) bool {
	return target == store.ErrNotFound && e.Status == http.StatusNotFound
}

// send calls the server and decodes a JSON answer into out (may be nil).
// Transport errors and 5xx are retried a few times: the records are
// idempotent.
func (r *RemoteRecorder) send(ctx context.Context, method, path string, body io.Reader, size int64, contentType string, out any) error {
	return r.sendTries(ctx, 4, method, path, body, size, contentType, out)
}

// Call is one JSON call to the server's API, shared by the admin commands
// (gyre policy, batches, rollouts, …): in is sent as the JSON body when not nil,
// and the answer decoded into out when not nil. A GET is retried on
// transport errors and 5xx like the recorder's own calls; any other
// method is sent once, since it may not be idempotent (a rollback). An
// error answer is a *ServerError.
func (r *RemoteRecorder) Call(ctx context.Context, method, path string, in, out any) error {
	tries := 1
	if method == http.MethodGet {
		tries = 4
	}
	if in == nil {
		return r.sendTries(ctx, tries, method, path, nil, -1, "", out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return r.sendTries(ctx, tries, method, path, bytes.NewReader(b), int64(len(b)), "application/json", out)
}

// CallBody is Call for a body that is not JSON of a Go value: body is
// sent as is with contentType (a suite in YAML, a fixture's bytes), and
// the answer's status is returned with the error. Only a GET is retried.
func (r *RemoteRecorder) CallBody(ctx context.Context, method, path, contentType string, body []byte, out any) (int, error) {
	tries := 1
	if method == http.MethodGet {
		tries = 4
	}
	var status int
	err := r.sendStatus(ctx, tries, method, path, bytes.NewReader(body), int64(len(body)), contentType, nil, out, &status)
	return status, err
}

// sendTries is send with at most tries attempts.
func (r *RemoteRecorder) sendTries(ctx context.Context, tries int, method, path string, body io.Reader, size int64, contentType string, out any) error {
	return r.sendStatus(ctx, tries, method, path, body, size, contentType, nil, out, nil)
}

// CallIdempotent is Call for a POST that carries an Idempotency-Key (a
// batch): the server answers a repeat with the original result, so it is
// retried on transport errors and 5xx like a GET.
func (r *RemoteRecorder) CallIdempotent(ctx context.Context, path, key string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return r.sendStatus(ctx, 4, http.MethodPost, path, bytes.NewReader(b), int64(len(b)), "application/json",
		http.Header{"Idempotency-Key": {key}}, out, nil)
}

// sendStatus is sendTries that also sends header and stores the last
// answer's status in status when it is not nil.
func (r *RemoteRecorder) sendStatus(ctx context.Context, tries int, method, path string, body io.Reader, size int64, contentType string, header http.Header, out any, status *int) error {
	op := method + " " + path
	var lastErr error
	for attempt := range tries {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt)*500*time.Millisecond); err != nil {
				return err
			}
			if s, ok := body.(io.Seeker); ok {
				if _, err := s.Seek(0, io.SeekStart); err != nil {
					return err
				}
			} else if body != nil {
				return lastErr // a stream cannot be replayed
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, r.base.String()+path, body)
		if err != nil {
			return err
		}
		if body != nil && size >= 0 {
			req.ContentLength = size
		}
		req.Header.Set("Authorization", "Bearer "+r.key)
		for k, v := range header {
			req.Header[k] = v
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := r.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = fmt.Errorf("%s: %w", op, err)
			continue
		}
		b, rerr := readAll(resp.Body, 64<<20)
		resp.Body.Close()
		if status != nil {
			*status = resp.StatusCode
		}
		if resp.StatusCode >= 500 {
			lastErr = serverError(op, resp.StatusCode, b)
			continue
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return serverError(op, resp.StatusCode, b)
		}
		if rerr != nil {
			return fmt.Errorf("%s: %w", op, rerr)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("%s: decode answer: %w", op, err)
			}
		}
		return nil
	}
	return lastErr
}

func serverError(op string, status int, body []byte) error {
	var ae apiError
	_ = json.Unmarshal(body, &ae)
	return &ServerError{Op: op, Status: status, Code: ae.Error.Code, Message: ae.Error.Message, Pointer: ae.Error.Pointer}
}

func (r *RemoteRecorder) sendJSON(ctx context.Context, method, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return r.send(ctx, method, path, bytes.NewReader(b), int64(len(b)), "application/json", out)
}

// CreateExperiment creates the experiment on the server.
func (r *RemoteRecorder) CreateExperiment(ctx context.Context, e store.NewExperiment) (store.Experiment, error) {
	var out ExperimentJSON
	err := r.sendJSON(ctx, http.MethodPost, "/api/v1/experiments", NewExperimentJSON{
		Suite: e.Suite, SuiteVersion: e.SuiteVersion, Harness: e.Harness, Capabilities: e.Capabilities, Config: e.Config,
	}, &out)
	if err != nil {
		return store.Experiment{}, err
	}
	return ExperimentFromJSON(out), nil
}

// Experiment reads one experiment from the server.
func (r *RemoteRecorder) Experiment(ctx context.Context, id string) (store.Experiment, error) {
	var out ExperimentJSON
	if err := r.send(ctx, http.MethodGet, "/api/v1/experiments/"+url.PathEscape(id), nil, -1, "", &out); err != nil {
		return store.Experiment{}, err
	}
	return ExperimentFromJSON(out), nil
}

// Runs reads every run record of an experiment from the server.
func (r *RemoteRecorder) Runs(ctx context.Context, experimentID string) ([]store.RunRecord, error) {
	return collectRuns(r.AllRuns(ctx, experimentID))
}

// AllRuns yields every run record of an experiment from the server, a
// page at a time.
func (r *RemoteRecorder) AllRuns(ctx context.Context, experimentID string) iter.Seq2[store.RunRecord, error] {
	return pagedRuns(func(cursor string) ([]store.RunRecord, string, error) {
		path := "/api/v1/experiments/" + url.PathEscape(experimentID) + "/runs?limit=" + strconv.Itoa(runPage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []RunJSON `json:"items"`
			NextCursor *string   `json:"next_cursor"`
		}
		if err := r.send(ctx, http.MethodGet, path, nil, -1, "", &page); err != nil {
			return nil, "", err
		}
		out := make([]store.RunRecord, len(page.Items))
		for i, j := range page.Items {
			out[i] = RunFromJSON("", experimentID, j)
		}
		return out, deref(page.NextCursor), nil
	})
}

// PutRun writes one run record on the server (idempotent).
func (r *RemoteRecorder) PutRun(ctx context.Context, rec store.RunRecord) error {
	j := RunToJSON(rec)
	j.UpdatedAt = nil
	path := "/api/v1/experiments/" + url.PathEscape(rec.ExperimentID) + "/runs/" +
		url.PathEscape(rec.CaseID) + "/" + strconv.Itoa(rec.Repetition)
	return r.sendJSON(ctx, http.MethodPut, path, j, nil)
}

// PutBlob uploads the spool with PUT /api/v1/blobs/{sha256}.
func (r *RemoteRecorder) PutBlob(ctx context.Context, s *Spool) error {
	body, err := s.Reader()
	if err != nil {
		return err
	}
	err = r.send(ctx, http.MethodPut, "/api/v1/blobs/"+s.SHA256(), body, s.Size(), "application/octet-stream", nil)
	var se *ServerError
	if errors.As(err, &se) && se.Status == http.StatusRequestEntityTooLarge {
		return fmt.Errorf("%w: %w", ErrBlobTooLarge, err)
	}
	return err
}

// Finish records the experiment's model and summary on the server.
func (r *RemoteRecorder) Finish(ctx context.Context, id, model string, summary json.RawMessage) error {
	return r.sendJSON(ctx, http.MethodPost, "/api/v1/experiments/"+url.PathEscape(id)+"/finish",
		FinishJSON{Model: strPtr(model), Summary: summary}, nil)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RegradeJSON is the answer of POST /api/v1/experiments/{id}/regrade.
type RegradeJSON struct {
	ExperimentID string         `json:"experiment_id"`
	Regraded     int            `json:"regraded"`
	Skipped      map[string]int `json:"skipped"`
	Summary      Report         `json:"summary"`
}

// Regrade asks the server to grade experiment id's stored runs again,
// with graders (a JSON list of declarations) or, when nil, the graders
// each run was recorded with.
func (r *RemoteRecorder) Regrade(ctx context.Context, id string, graders json.RawMessage) (RegradeResult, error) {
	body := map[string]json.RawMessage{}
	if graders != nil {
		body["graders"] = graders
	}
	b, err := json.Marshal(body)
	if err != nil {
		return RegradeResult{}, err
	}
	// Sent once: a regrade is not idempotent (each adds a verdict set to
	// every run), so a failure is reported rather than repeated.
	var out RegradeJSON
	if err := r.sendTries(ctx, 1, http.MethodPost, "/api/v1/experiments/"+url.PathEscape(id)+"/regrade",
		bytes.NewReader(b), int64(len(b)), "application/json", &out); err != nil {
		return RegradeResult{}, err
	}
	return RegradeResult{Report: out.Summary, Regraded: out.Regraded, Skipped: out.Skipped}, nil
}
