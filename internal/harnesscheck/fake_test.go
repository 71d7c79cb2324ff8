package harnesscheck_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is a hand-written Harness API v1 server that follows the contract
// unless a field tells it to misbehave.
type fake struct {
	mu   sync.Mutex
	caps map[string]any
	runs []*fakeRun
	now  time.Time

	// Misbehaviours.
	rawCaps        []byte // served as-is instead of caps
	redirectCaps   string // answer GET /capabilities with a 302 here
	createStatus   int    // status of POST /runs (default 201)
	noModel        bool   // RunStatus without model
	ignoreQuery    bool
	ignoreLimit    bool
	ignoreSince    bool
	oldestFirst    bool
	sessionOf      func(i int) string // session_id of the i-th run (0-based); nil: none
	groupSessions  bool               // list items sharing a session_id once
	createdAt      func(t time.Time) string
	files          []map[string]any // workspace listing; nil: one file
	fileBody       func(path string) []byte
	fileType       string // Content-Type of workspace files (default application/octet-stream)
	trajectory     string // nil: a valid ATIF document
	ignoreStop     bool   // stop acknowledged, run keeps running
	noFetch        bool   // file urls are never fetched
	pollsToFinish  int    // GET /runs/{id} answers running this many times
	requireKey     string
	sawKeyMismatch bool
	onPoll         func() // called after each GET /runs/{id}
}

type fakeRun struct {
	id        string
	title     string
	session   string
	created   time.Time
	polls     int
	stopped   bool
	fetchErr  string
	multipart bool
}

// defaultCaps declares everything the checks exercise.
func defaultCaps() map[string]any {
	return map[string]any{
		"contract_version": "v1",
		"agent":            "fake",
		"revision":         "abc123",
		"input_schema":     map[string]any{"type": "object", "required": []any{"question"}, "properties": map[string]any{"question": map[string]any{"type": "string"}}},
		"check_input":      map[string]any{"question": "What is the Status of Order 1042?"},
		"provides":         map[string]any{"trajectory": true, "workspace": true, "run_listing": true, "artifacts": true},
		"accepts":          map[string]any{"files": true, "file_urls": true, "stop": true},
		"limits":           map[string]any{"max_concurrent_runs": 2},
	}
}

const validTrajectory = `{"schema_version":"ATIF-v1.6","session_id":"s1","agent":{"name":"fake","version":"1"},
"steps":[{"step_id":1,"source":"user","message":"hi"},{"step_id":2,"source":"agent","message":"hello"}]}`

// newFake starts a fake with the given changes and returns it with its URL.
func newFake(t *testing.T, change func(f *fake)) (*fake, string) {
	t.Helper()
	f := &fake{caps: defaultCaps(), now: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), pollsToFinish: 1}
	if change != nil {
		change(f)
	}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return f, hs.URL
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": "bad", "message": msg}})
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.requireKey != "" && r.Header.Get("x-api-key") != f.requireKey {
		f.mu.Lock()
		f.sawKeyMismatch = true
		f.mu.Unlock()
		writeError(w, http.StatusUnauthorized, "bad key")
		return
	}
	segs := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	switch {
	case r.Method == "GET" && r.URL.Path == "/capabilities":
		f.getCaps(w, r)
	case r.Method == "POST" && r.URL.Path == "/runs":
		f.postRun(w, r)
	case r.Method == "GET" && r.URL.Path == "/runs":
		f.list(w, r)
	case len(segs) >= 2 && segs[0] == "runs":
		f.mu.Lock()
		run := f.find(segs[1])
		f.mu.Unlock()
		if run == nil {
			writeError(w, http.StatusNotFound, "no such run")
			return
		}
		switch {
		case len(segs) == 2 && r.Method == "GET":
			f.status(w, run)
		case len(segs) == 3 && segs[2] == "stop" && r.Method == "POST":
			f.mu.Lock()
			if !f.ignoreStop {
				run.stopped = true
			}
			f.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		case len(segs) == 3 && segs[2] == "trajectory" && r.Method == "GET":
			w.Header().Set("Content-Type", "application/json")
			if f.trajectory != "" {
				_, _ = io.WriteString(w, f.trajectory)
				return
			}
			_, _ = io.WriteString(w, validTrajectory)
		case len(segs) == 3 && segs[2] == "files" && r.Method == "GET":
			files := f.files
			if files == nil {
				files = []map[string]any{{"path": "out/answer.txt", "size": 3}}
			}
			writeJSON(w, http.StatusOK, map[string]any{"files": files})
		case len(segs) >= 4 && segs[2] == "files" && r.Method == "GET":
			ct := "application/octet-stream"
			if f.fileType != "" {
				ct = f.fileType
			}
			w.Header().Set("Content-Type", ct)
			if f.fileBody != nil {
				_, _ = w.Write(f.fileBody(strings.Join(segs[3:], "/")))
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		default:
			writeError(w, http.StatusNotFound, "no route")
		}
	default:
		writeError(w, http.StatusNotFound, "no route")
	}
}

func (f *fake) find(escapedID string) *fakeRun {
	for _, r := range f.runs {
		if r.id == escapedID {
			return r
		}
	}
	return nil
}

func (f *fake) getCaps(w http.ResponseWriter, r *http.Request) {
	if f.redirectCaps != "" {
		http.Redirect(w, r, f.redirectCaps, http.StatusFound)
		return
	}
	if f.rawCaps != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.rawCaps)
		return
	}
	writeJSON(w, http.StatusOK, f.caps)
}

func (f *fake) postRun(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input map[string]any `json:"input"`
		Files []struct {
			Name string  `json:"name"`
			URL  *string `json:"url"`
		} `json:"files"`
	}
	multipart := strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data")
	if multipart {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := json.Unmarshal([]byte(r.FormValue("payload")), &req); err != nil {
			writeError(w, http.StatusBadRequest, "payload: "+err.Error())
			return
		}
		if len(r.MultipartForm.File["files"]) != len(req.Files) {
			writeError(w, http.StatusBadRequest, "one part per file")
			return
		}
	} else if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Input == nil {
		writeError(w, http.StatusUnprocessableEntity, "input is required")
		return
	}
	run := &fakeRun{multipart: multipart}
	if q, ok := req.Input["question"].(string); ok {
		run.title = q
	}
	for _, file := range req.Files {
		if file.URL == nil || f.noFetch {
			continue
		}
		resp, err := http.Get(*file.URL)
		if err != nil {
			run.fetchErr = err.Error()
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	f.mu.Lock()
	i := len(f.runs)
	f.now = f.now.Add(time.Second)
	run.created = f.now
	run.id = fmt.Sprintf("%08x-0000-7000-8000-%012x", 0x01900000+i, i)
	if f.sessionOf != nil {
		run.session = f.sessionOf(i)
	}
	f.runs = append(f.runs, run)
	f.mu.Unlock()
	status := http.StatusCreated
	if f.createStatus != 0 {
		status = f.createStatus
	}
	writeJSON(w, status, map[string]any{"run_id": run.id})
}

func (f *fake) status(w http.ResponseWriter, run *fakeRun) {
	f.mu.Lock()
	st := map[string]any{"status": "running"}
	switch {
	case run.stopped:
		st["status"] = "cancelled"
	case run.polls >= f.pollsToFinish:
		st["status"] = "completed"
		st["answer"] = "Order 1042 shipped."
		st["artifacts"] = []any{map[string]any{"name": "answer", "path": "out/answer.txt"}}
	}
	run.polls++
	if !f.noModel {
		st["model"] = "fake-model"
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
	if f.onPoll != nil {
		f.onPoll()
	}
}

func (f *fake) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	runs := slices.Clone(f.runs)
	f.mu.Unlock()
	query := q.Get("query")
	var kept []*fakeRun
	for _, run := range runs {
		if query != "" && !f.ignoreQuery {
			norm := strings.ToLower(strings.ReplaceAll(query, "-", ""))
			isID := len(norm) >= 8 && strings.Trim(norm, "0123456789abcdef") == ""
			if isID && !strings.HasPrefix(strings.ReplaceAll(run.id, "-", ""), norm) {
				continue
			}
			if !isID && !strings.Contains(strings.ToLower(run.title), strings.ToLower(query)) {
				continue
			}
		}
		if s := q.Get("since"); s != "" && !f.ignoreSince {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				writeError(w, http.StatusBadRequest, "since")
				return
			}
			if run.created.Before(t) {
				continue
			}
		}
		if u := q.Get("until"); u != "" {
			t, err := time.Parse(time.RFC3339Nano, u)
			if err != nil {
				writeError(w, http.StatusBadRequest, "until")
				return
			}
			if !run.created.Before(t) {
				continue
			}
		}
		kept = append(kept, run)
	}
	if !f.oldestFirst {
		slices.Reverse(kept)
	}
	if f.groupSessions {
		seen := map[string]bool{}
		kept = slices.DeleteFunc(kept, func(run *fakeRun) bool {
			if run.session == "" {
				return false
			}
			dup := seen[run.session]
			seen[run.session] = true
			return dup
		})
	}
	total := len(kept)
	offset, _ := strconv.Atoi(q.Get("offset"))
	limit := 50
	if l := q.Get("limit"); l != "" {
		limit, _ = strconv.Atoi(l)
	}
	if f.ignoreLimit {
		limit, offset = len(kept), 0
	}
	if offset > len(kept) {
		offset = len(kept)
	}
	kept = kept[offset:]
	kept = kept[:min(limit, len(kept))]
	items := []any{}
	for _, run := range kept {
		ca := run.created.Format(time.RFC3339Nano)
		if f.createdAt != nil {
			ca = f.createdAt(run.created)
		}
		it := map[string]any{"run_id": run.id, "title": run.title, "created_at": ca}
		if run.session != "" {
			it["session_id"] = run.session
		}
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": items, "total": total})
}
