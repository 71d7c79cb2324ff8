package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// putFixture uploads content as fixture name and returns the answer.
func (e *env) putFixture(key, name, content string) response {
	e.t.Helper()
	return e.do(http.MethodPut, "/api/v1/fixtures/"+name, key, strings.NewReader(content), "Content-Type", "application/octet-stream")
}

// uploadSuite posts a suite document with a Content-Type.
func (e *env) uploadSuite(key, contentType, doc string) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/api/v1/suites", key, strings.NewReader(doc), "Content-Type", contentType)
}

// suiteAnswer is the decoded answer of POST /api/v1/suites.
type suiteAnswer struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Cases         int    `json:"cases"`
	ContentSHA256 string `json:"content_sha256"`
}

func (e *env) mustUploadSuite(contentType, doc string, status int) suiteAnswer {
	e.t.Helper()
	r := e.uploadSuite(e.admin, contentType, doc)
	if r.status != status {
		e.t.Fatalf("POST /api/v1/suites: status %d, want %d: %s", r.status, status, r.body)
	}
	var a suiteAnswer
	decodeInto(e.t, r, &a)
	return a
}

// taskRef and taskItems decode the answers of the task-creating routes.
type taskRef struct {
	TaskID string `json:"task_id"`
	CaseID string `json:"case_id"`
}

type taskItems struct {
	Suite   string    `json:"suite"`
	Version string    `json:"version"`
	Items   []taskRef `json:"items"`
}

// taskView is a decoded task.
type taskView struct {
	TaskID    string          `json:"task_id"`
	CaseID    string          `json:"case_id"`
	TurnInput string          `json:"turn_input"`
	Input     json.RawMessage `json:"input"`
	Graders   json.RawMessage `json:"graders"`
	Source    map[string]any  `json:"source"`
	CreatedAt string          `json:"created_at"`
}

func (e *env) mustCreateTasks(body string) taskItems {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/tasks", e.admin, body)
	if r.status != http.StatusCreated {
		e.t.Fatalf("POST /api/v1/tasks %s: status %d: %s", body, r.status, r.body)
	}
	var items taskItems
	decodeInto(e.t, r, &items)
	return items
}

func (e *env) mustTask(id string) taskView {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/tasks/"+id, e.admin, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET task %s: status %d: %s", id, r.status, r.body)
	}
	var tv taskView
	decodeInto(e.t, r, &tv)
	return tv
}

// listAll pages through a list route and returns every item's raw JSON.
func (e *env) listAll(path, key string, limit int) []json.RawMessage {
	e.t.Helper()
	var out []json.RawMessage
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cursor := ""
	for range 100 {
		p := path + sep + "limit=" + strconv.Itoa(limit)
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		r := e.do(http.MethodGet, p, key, nil)
		if r.status != http.StatusOK {
			e.t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
		var l struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"next_cursor"`
		}
		decodeInto(e.t, r, &l)
		if l.Items == nil {
			e.t.Fatalf("GET %s: items is not a list: %s", p, r.body)
		}
		out = append(out, l.Items...)
		if l.NextCursor == nil {
			return out
		}
		cursor = *l.NextCursor
	}
	e.t.Fatalf("GET %s does not end", path)
	return nil
}

// blobKeys lists every key in the blob store.
func (e *env) blobKeys() []string {
	e.t.Helper()
	var keys []string
	for o, err := range e.blobs.List(e.t.Context(), "") {
		if err != nil {
			e.t.Fatalf("list blobs: %v", err)
		}
		keys = append(keys, o.Key)
	}
	slices.Sort(keys)
	return keys
}

// insertTurns stores production turns of agentID in tenantID; inputs maps
// each turn id to its input_text (nil for null).
func (e *env) insertTurns(tenantID, agentID string, ids []string, inputs map[string]*string) {
	e.t.Helper()
	var turns []store.NewTurn
	for _, id := range ids {
		body, err := json.Marshal(map[string]any{
			"turn_id": id, "input_text": inputs[id], "final_text": "ok",
			"tool_calls": nil, "tool_calls_omitted_count": 0,
		})
		if err != nil {
			e.t.Fatal(err)
		}
		h, err := jcs.Hash(body)
		if err != nil {
			e.t.Fatal(err)
		}
		turns = append(turns, store.NewTurn{TurnID: id, Body: body, SHA256: h})
	}
	if _, err := e.st.InsertTurns(e.t.Context(), tenantID, agentID, turns); err != nil {
		e.t.Fatalf("InsertTurns: %v", err)
	}
}

func decodeInto(t *testing.T, r response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func textPtr(s string) *string { return &s }
