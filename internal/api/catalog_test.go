package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/jcs"
)

// A suite used by many tests: one case with a sole question, one without.
const refundsYAML = `name: refunds
version: "3"
defaults:
  timeout: 5m
  graders: [{max_llm_calls: 20}]
cases:
  - id: refund-small
    input: {question: "Refund order 1042, it arrived broken."}
    graders:
      - contains: refund
  - id: refund-none
    input: {question: "Where is my parcel?", locale: en-GB}
    graders_replace: true
    graders: [{not_contains: refund}]
`

// The same suite as JSON, written differently (key order, long timeout
// form, spacing): it has the same content.
const refundsJSON = `{
  "cases": [
    {"graders": [{"contains": "refund"}], "input": {"question": "Refund order 1042, it arrived broken."}, "id": "refund-small"},
    {"id": "refund-none", "input": {"locale": "en-GB", "question": "Where is my parcel?"},
     "graders": [{"not_contains": "refund"}], "graders_replace": true}
  ],
  "defaults": {"graders": [{"max_llm_calls": 20}], "timeout": 300},
  "version": "3",
  "name": "refunds"
}`

func TestFixtures_PutCreatedThenIdentical(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			want := fixtureJSON{Name: "invoice-1042.pdf", SHA256: sha256Hex("%PDF v1"), SizeBytes: 7}
			for i, status := range []int{http.StatusCreated, http.StatusOK} {
				r := e.putFixture(e.admin, "invoice-1042.pdf", "%PDF v1")
				if r.status != status {
					t.Fatalf("put %d: status %d, want %d: %s", i, r.status, status, r.body)
				}
				var got fixtureJSON
				decodeInto(t, r, &got)
				if got != want {
					t.Errorf("put %d = %+v, want %+v", i, got, want)
				}
			}
			// A new revision is created, and becomes the one listed.
			if r := e.putFixture(e.admin, "invoice-1042.pdf", "%PDF v2!"); r.status != http.StatusCreated {
				t.Fatalf("new revision: %d %s", r.status, r.body)
			}
			e.putFixture(e.admin, "a.txt", "")
			items := e.listAll("/api/v1/fixtures", e.admin, 1)
			var got []fixtureJSON
			for _, it := range items {
				var f fixtureJSON
				if err := json.Unmarshal(it, &f); err != nil {
					t.Fatal(err)
				}
				got = append(got, f)
			}
			wantList := []fixtureJSON{
				{Name: "a.txt", SHA256: sha256Hex(""), SizeBytes: 0},
				{Name: "invoice-1042.pdf", SHA256: sha256Hex("%PDF v2!"), SizeBytes: 8},
			}
			if diff := cmp.Diff(wantList, got); diff != "" {
				t.Errorf("GET /api/v1/fixtures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFixtures_NameGrammarAfterPercentDecoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	tests := []struct {
		path string // as sent, after /api/v1/fixtures/
		name string // the stored name; "" when refused
	}{
		{"invoice-1042.pdf", "invoice-1042.pdf"},
		{"ok%2Dname_v1.txt", "ok-name_v1.txt"}, // %2D is "-": decoded, then valid
		{"a..b", "a..b"},
		{"...", "..."},
		{"%2E%2E.x", "...x"},
		{strings.Repeat("n", 255), strings.Repeat("n", 255)},
		{"a%2Fb", ""}, // "a/b"
		{"..%2F..%2Fetc%2Fpasswd", ""},
		{"a%5Cb", ""},         // backslash
		{"a%20b", ""},         // space
		{"a%00b", ""},         // NUL
		{"%C3%A9t%C3%A9", ""}, // "été": not ASCII
		{"a%3Fb", ""},         // "?"
		{strings.Repeat("n", 256), ""},
		{"%2E", ""},    // "."
		{"%2E%2E", ""}, // ".."
		{"a%25b", ""},  // "%"
	}
	for _, tc := range tests {
		r := e.putFixture(e.admin, tc.path, "x")
		if tc.name == "" {
			r.wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
			e.do(http.MethodGet, "/api/fixtures/"+tc.path, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
			continue
		}
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Errorf("PUT %s: %d %s", tc.path, r.status, r.body)
			continue
		}
		var f fixtureJSON
		decodeInto(t, r, &f)
		if f.Name != tc.name {
			t.Errorf("PUT %s stored name %q, want %q", tc.path, f.Name, tc.name)
		}
	}
	// Refused names stored nothing: only the valid ones are listed.
	if n := len(e.listAll("/api/v1/fixtures", e.admin, 500)); n != 6 {
		t.Errorf("%d fixtures listed, want the 6 valid names", n)
	}
}

func TestFixtures_BlobKeyNeverFromName(t *testing.T) {
	t.Parallel()
	for _, b := range []blobBackend{fileBlobs, s3Blobs} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, sqliteEngine, Config{}, withBlobs(b))
			other, otherAdmin := e.newTenant("other")
			names := []string{"invoice-1042.pdf", "fixtures", "..evil", "tmp"}
			for _, name := range names {
				if r := e.putFixture(e.admin, name, "bytes of "+name); r.status != http.StatusCreated {
					t.Fatalf("PUT %s: %d %s", name, r.status, r.body)
				}
			}
			// The same bytes under another name, and in another tenant.
			e.putFixture(e.admin, "copy.pdf", "bytes of invoice-1042.pdf")
			e.putFixture(otherAdmin, "invoice-1042.pdf", "bytes of invoice-1042.pdf")

			var want []string
			for _, name := range names {
				want = append(want, "fixtures/"+e.tenant.ID+"/"+sha256Hex("bytes of "+name))
			}
			want = append(want, "fixtures/"+other.ID+"/"+sha256Hex("bytes of invoice-1042.pdf"))
			keys := e.blobKeys()
			if diff := cmp.Diff(slices.Sorted(slices.Values(want)), keys); diff != "" {
				t.Errorf("blob keys (-want +got):\n%s", diff)
			}
			for _, k := range keys {
				for _, name := range append(names, "copy.pdf") {
					if strings.Contains(k, name) && name != "fixtures" {
						t.Errorf("blob key %q contains the fixture name %q", k, name)
					}
				}
			}
		})
	}
}

func TestFixtures_ContentServedToTenantKeys(t *testing.T) {
	t.Parallel()
	for _, b := range []blobBackend{fileBlobs, s3Blobs} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, sqliteEngine, Config{}, withBlobs(b))
			_, otherAdmin := e.newTenant("other")
			big := strings.Repeat("0123456789abcdef", 9000) // several copy chunks
			e.putFixture(e.admin, "doc.bin", "old")
			e.putFixture(e.admin, "doc.bin", big)
			reader := e.createKey(e.admin, `{"role":"reader"}`)
			evaluator := e.createKey(e.admin, `{"role":"evaluator"}`)
			agent := e.createKey(e.admin, `{"role":"agent"}`)

			for _, key := range []string{e.admin, reader.Key, evaluator.Key} {
				r := e.do(http.MethodGet, "/api/fixtures/doc.bin", key, nil)
				if r.status != http.StatusOK || string(r.body) != big {
					t.Fatalf("GET latest: %d, %d bytes", r.status, len(r.body))
				}
				for h, want := range map[string]string{
					"Content-Type":           "application/octet-stream",
					"ETag":                   `"` + sha256Hex(big) + `"`,
					"X-Content-Type-Options": "nosniff",
					"Content-Disposition":    `attachment; filename="doc.bin"`,
				} {
					if got := r.header.Get(h); got != want {
						t.Errorf("%s = %q, want %q", h, got, want)
					}
				}
			}
			r := e.do(http.MethodGet, "/api/fixtures/doc.bin?sha256="+sha256Hex("old"), reader.Key, nil)
			if r.status != http.StatusOK || string(r.body) != "old" {
				t.Errorf("GET old revision: %d %q", r.status, r.body)
			}
			e.do(http.MethodGet, "/api/fixtures/doc.bin?sha256="+sha256Hex("never"), reader.Key, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/fixtures/doc.bin?sha256=ABC", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			e.do(http.MethodGet, "/api/fixtures/doc.bin?x=1", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			e.do(http.MethodGet, "/api/fixtures/nope.bin", reader.Key, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/fixtures/doc.bin", otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/fixtures/doc.bin", agent.Key, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			e.do(http.MethodGet, "/api/fixtures/doc.bin", "", nil).wantError(t, http.StatusUnauthorized, gyre.CodeUnauthorized, "")
			e.putFixture(reader.Key, "x", "y").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		})
	}
}

// TestFixtures_CorruptBlobCutShort: bytes that no longer match their
// digest are never served as a complete response.
func TestFixtures_CorruptBlobCutShort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	content := strings.Repeat("a", 100<<10)
	e.putFixture(e.admin, "doc.bin", content)
	key, err := blobstore.FixtureKey(e.tenant.ID, sha256Hex(content))
	if err != nil {
		t.Fatal(err)
	}
	tampered := strings.Repeat("b", len(content))
	if _, err := e.blobs.Put(t.Context(), key, strings.NewReader(tampered), nil); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, e.ts.URL+"/api/fixtures/doc.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.admin)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %d bytes of a tampered fixture without an error", len(got))
	}
	if len(got) >= len(content) {
		t.Errorf("client got %d bytes, want fewer than %d", len(got), len(content))
	}
}

func TestFixtures_BodyEncodingAndLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{MaxBlobBytes: 1000}, withBlobs(fileBlobs))
	gz := func(s string) *bytes.Buffer {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return &b
	}
	r := e.do(http.MethodPut, "/api/v1/fixtures/z.txt", e.admin, gz("hello gzip"), "Content-Encoding", "gzip")
	var f fixtureJSON
	decodeInto(t, r, &f)
	if r.status != http.StatusCreated || f.SHA256 != sha256Hex("hello gzip") || f.SizeBytes != 10 {
		t.Errorf("gzip PUT = %d %+v, want the decompressed bytes", r.status, f)
	}
	e.putFixture(e.admin, "big.bin", strings.Repeat("x", 1001)).wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	// A small gzip body that inflates past the limit.
	e.do(http.MethodPut, "/api/v1/fixtures/bomb.bin", e.admin, gz(strings.Repeat("x", 100000)), "Content-Encoding", "gzip").
		wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	e.do(http.MethodPut, "/api/v1/fixtures/bad.bin", e.admin, strings.NewReader("not gzip"), "Content-Encoding", "gzip").
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, "")
	e.do(http.MethodPut, "/api/v1/fixtures/br.bin", e.admin, strings.NewReader("x"), "Content-Encoding", "br").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	names := e.listAll("/api/v1/fixtures", e.admin, 50)
	if len(names) != 1 {
		t.Errorf("fixtures after refused puts: %s", names)
	}
	if keys := e.blobKeys(); len(keys) != 1 {
		t.Errorf("blob keys after refused puts: %v", keys)
	}
}

func TestFixtures_NoBlobStore503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{})
	e.do(http.MethodPut, "/api/v1/fixtures/a.txt", e.admin, strings.NewReader("x")).wantError(t, http.StatusServiceUnavailable, gyre.CodeUnavailable, "")
}

func TestSuites_YAMLAndJSONSameVersion(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			y := e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			j := e.mustUploadSuite("application/json", refundsJSON, http.StatusOK)
			if y != j {
				t.Errorf("YAML upload %+v, JSON upload %+v: want the same version", y, j)
			}
			if y.Name != "refunds" || y.Version != "3" || y.Cases != 2 || !blobstore.ValidSHA256(y.ContentSHA256) {
				t.Errorf("answer = %+v", y)
			}
			// Without an explicit version, the version is the content hash,
			// the same for both forms.
			noVersion := strings.Replace(refundsYAML, "version: \"3\"\n", "", 1)
			a := e.mustUploadSuite("text/yaml", noVersion, http.StatusCreated)
			var doc map[string]any
			if err := json.Unmarshal([]byte(refundsJSON), &doc); err != nil {
				t.Fatal(err)
			}
			delete(doc, "version")
			raw, _ := json.Marshal(doc)
			b := e.mustUploadSuite("application/json; charset=utf-8", string(raw), http.StatusOK)
			if a != b || a.Version != a.ContentSHA256 {
				t.Errorf("hash-versioned uploads = %+v and %+v; want one version named by its hash", a, b)
			}
		})
	}
}

func TestSuites_IdenticalReuploadIs200(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	first := e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
	for range 2 {
		if again := e.mustUploadSuite("application/x-yaml", refundsYAML, http.StatusOK); again != first {
			t.Errorf("re-upload = %+v, want %+v", again, first)
		}
	}
	r := e.uploadSuite(e.admin, "application/yaml", refundsYAML)
	if loc := r.header.Get("Location"); loc != "/api/v1/suites/refunds/versions/3" {
		t.Errorf("Location = %q", loc)
	}
}

func TestSuites_ExplicitVersionDifferentContent409(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			orig := e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			changed := strings.Replace(refundsYAML, "contains: refund", "contains: refunded", 1)
			e.uploadSuite(e.admin, "application/yaml", changed).wantError(t, http.StatusConflict, gyre.CodeSuiteVersionConflict, "/version")
			// Nothing changed: the stored version is the original.
			r := e.do(http.MethodGet, "/api/v1/suites/refunds/versions/3", e.admin, nil)
			var got suiteDocumentJSON
			decodeInto(t, r, &got)
			if got.ContentSHA256 != orig.ContentSHA256 || strings.Contains(string(got.Document), "refunded") {
				t.Errorf("version 3 after a conflict = %s", r.body)
			}
			// Another version name takes the new content.
			e.mustUploadSuite("application/yaml", strings.Replace(changed, `version: "3"`, `version: "4"`, 1), http.StatusCreated)
		})
	}
}

func TestSuites_FixtureMissing422Pointer(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, otherAdmin := e.newTenant("other")
			e.putFixture(e.admin, "present.pdf", "p")
			e.putFixture(otherAdmin, "theirs.pdf", "t") // another tenant's fixture is not ours
			doc := `name: docs
cases:
  - id: a
    input: {question: q}
    files: [{name: present.pdf}]
  - id: b
    input: {question: q}
    files: [{name: present.pdf}, {name: theirs.pdf, context: "their file"}]
`
			r := e.uploadSuite(e.admin, "application/yaml", doc)
			r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeFixtureMissing, "/cases/1/files/1/name")
			if !strings.Contains(r.errorBody(t).Message, "theirs.pdf") {
				t.Errorf("message %q does not name the fixture", r.errorBody(t).Message)
			}
			if items := e.listAll("/api/v1/suites", e.admin, 50); len(items) != 0 {
				t.Errorf("a refused suite was stored: %s", items)
			}
			// Once the fixture has a revision, the suite uploads.
			e.putFixture(e.admin, "theirs.pdf", "ours now")
			e.mustUploadSuite("application/yaml", doc, http.StatusCreated)
		})
	}
}

func TestSuites_NewFixtureRevisionDoesNotChangeOldVersion(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			doc := "name: docs\ncases:\n  - id: a\n    input: {question: q}\n    files: [{name: invoice.pdf}]\n"
			e.putFixture(e.admin, "invoice.pdf", "v1")
			v1 := e.mustUploadSuite("application/yaml", doc, http.StatusCreated)
			e.putFixture(e.admin, "invoice.pdf", "v2")

			fixturesOf := func(version string) map[string]string {
				r := e.do(http.MethodGet, "/api/v1/suites/docs/versions/"+version, e.admin, nil)
				if r.status != http.StatusOK {
					t.Fatalf("GET version %s: %d %s", version, r.status, r.body)
				}
				var got struct {
					Document struct {
						Fixtures map[string]string `json:"fixtures"`
					} `json:"document"`
				}
				decodeInto(t, r, &got)
				return got.Document.Fixtures
			}
			if got := fixturesOf(v1.Version); got["invoice.pdf"] != sha256Hex("v1") {
				t.Errorf("old version references %v after a new revision, want v1's digest", got)
			}
			// The same document uploaded now resolves the new revision: a new
			// version, with another content hash.
			v2 := e.mustUploadSuite("application/yaml", doc, http.StatusCreated)
			if v2.Version == v1.Version {
				t.Fatalf("re-upload after a new fixture revision kept version %s", v1.Version)
			}
			if got := fixturesOf(v2.Version); got["invoice.pdf"] != sha256Hex("v2") {
				t.Errorf("new version references %v, want v2's digest", got)
			}
			if got := fixturesOf(v1.Version); got["invoice.pdf"] != sha256Hex("v1") {
				t.Errorf("old version changed to %v", got)
			}
			// The old revision's bytes are still served.
			r := e.do(http.MethodGet, "/api/fixtures/invoice.pdf?sha256="+sha256Hex("v1"), e.admin, nil)
			if r.status != http.StatusOK || string(r.body) != "v1" {
				t.Errorf("old revision's bytes: %d %q", r.status, r.body)
			}
		})
	}
}

func TestSuites_CommandGraderNotAllowed(t *testing.T) {
	t.Parallel()
	doc := func(argv0 string) string {
		return `{"name":"cmd","cases":[{"id":"a","input":{"question":"q"},"graders":[{"contains":"x"},{"command":{"run":["` + argv0 + `","--strict"]}}]}]}`
	}
	defaults := `{"name":"cmd2","defaults":{"graders":[{"command":["/opt/bin/check"]}]},"cases":[{"id":"a","input":{"question":"q"}}]}`

	// Default: refuse every command grader.
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	e.uploadSuite(e.admin, "application/json", doc("/opt/bin/check")).
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeGraderNotAllowed, "/cases/0/graders/1/command")
	e.uploadSuite(e.admin, "application/json", defaults).
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeGraderNotAllowed, "/defaults/graders/0/command")
	e.insertTurns(e.tenant.ID, "bot", []string{"t1"}, map[string]*string{"t1": textPtr("hi")})
	e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, `{"agent_id":"bot","turn_ids":["t1"],"graders":[{"command":["/opt/bin/check"]}]}`).
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeGraderNotAllowed, "/graders/0/command")
	if items := e.listAll("/api/v1/suites", e.admin, 50); len(items) != 0 {
		t.Errorf("refused suites were stored: %s", items)
	}

	// An allow-list admits exactly its executables.
	var asked []string
	allow := newEnv(t, sqliteEngine, Config{AllowCommand: func(_, argv0 string) bool {
		asked = append(asked, argv0)
		return argv0 == "/opt/bin/check"
	}}, withBlobs(fileBlobs))
	allow.mustUploadSuite("application/json", doc("/opt/bin/check"), http.StatusCreated)
	allow.mustUploadSuite("application/json", defaults, http.StatusCreated)
	allow.uploadSuite(allow.admin, "application/json", doc("/bin/sh")).
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeGraderNotAllowed, "/cases/0/graders/1/command")
	if !cmp.Equal(asked, []string{"/opt/bin/check", "/opt/bin/check", "/bin/sh"}) {
		t.Errorf("AllowCommand was asked %q, want each grader's argv[0]", asked)
	}
	tasks := allow.mustCreateTasks(`{"suite":"cmd"}`)
	if g := allow.mustTask(tasks.Items[0].TaskID).Graders; !strings.Contains(string(g), "/opt/bin/check") {
		t.Errorf("task graders = %s, want the allowed command frozen", g)
	}
}

func TestSuites_InvalidBody422Pointer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	tests := []struct {
		name, ct, doc, code, ptr string
	}{
		{"unknown key", "application/yaml", "name: s\ncases:\n  - id: a\n    inptu: {}\n", gyre.CodeInvalidBody, "/cases/0/inptu"},
		{"bad grader", "application/json", `{"name":"s","cases":[{"id":"a","input":{},"graders":[{"tool_called":{"name":7}}]}]}`, gyre.CodeInvalidBody, "/cases/0/graders/0/tool_called/name"},
		{"duplicate case", "application/json", `{"name":"s","cases":[{"id":"a","input":{}},{"id":"a","input":{}}]}`, gyre.CodeInvalidBody, "/cases/1/id"},
		{"numeric version", "application/yaml", "name: s\nversion: 3\ncases: [{id: a, input: {}}]\n", gyre.CodeInvalidBody, "/version"},
		{"bad name", "application/json", `{"name":"a b","cases":[{"id":"a","input":{}}]}`, gyre.CodeInvalidBody, "/name"},
		{"JSONL bad line", "application/x-ndjson", "{\"id\":\"a\",\"input\":{}}\n{\"id\":\"b\",\"input\":[]}\n", gyre.CodeInvalidBody, "/cases/1/input"},
	}
	for _, tc := range tests {
		path := "/api/v1/suites"
		if strings.Contains(tc.ct, "ndjson") {
			path += "?name=lines"
		}
		r := e.do(http.MethodPost, path, e.admin, strings.NewReader(tc.doc), "Content-Type", tc.ct)
		if r.status != http.StatusUnprocessableEntity || r.errorBody(t).Code != tc.code || r.errorBody(t).Pointer != tc.ptr {
			t.Errorf("%s: %d %s, want 422 %s at %s", tc.name, r.status, r.body, tc.code, tc.ptr)
		}
	}
}

func TestSuites_ContentTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	jsonl := "{\"id\":\"a\",\"input\":{\"question\":\"q\"}}\n\n{\"id\":\"b\",\"input\":{\"question\":\"r\"}}\n"
	r := e.do(http.MethodPost, "/api/v1/suites?name=lines", e.admin, strings.NewReader(jsonl), "Content-Type", "application/jsonl")
	var a suiteAnswer
	decodeInto(t, r, &a)
	if r.status != http.StatusCreated || a.Name != "lines" || a.Cases != 2 {
		t.Errorf("JSONL upload = %d %s", r.status, r.body)
	}
	e.do(http.MethodPost, "/api/v1/suites", e.admin, strings.NewReader(jsonl), "Content-Type", "application/x-ndjson").
		wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
	e.do(http.MethodPost, "/api/v1/suites?name=a%2Fb", e.admin, strings.NewReader(jsonl), "Content-Type", "application/x-ndjson").
		wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
	e.do(http.MethodPost, "/api/v1/suites?name=x", e.admin, strings.NewReader(refundsJSON), "Content-Type", "application/json").
		wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
	e.do(http.MethodPost, "/api/v1/suites", e.admin, strings.NewReader(refundsJSON), "Content-Type", "text/plain").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	e.do(http.MethodPost, "/api/v1/suites", e.admin, strings.NewReader(refundsJSON), "Content-Type", "").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	e.do(http.MethodPost, "/api/v1/suites", e.admin, strings.NewReader(refundsYAML), "Content-Type", "application/json").
		wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, "")
}

func TestSuites_ListAndGet(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, otherAdmin := e.newTenant("other")
			v3 := e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			v4 := e.mustUploadSuite("application/yaml", strings.Replace(refundsYAML, `"3"`, `"4"`, 1), http.StatusCreated)
			e.mustUploadSuite("application/json", `{"name":"alpha","cases":[{"id":"a","input":{}}]}`, http.StatusCreated)

			reader := e.createKey(e.admin, `{"role":"reader"}`)
			evaluator := e.createKey(e.admin, `{"role":"evaluator"}`)
			for _, key := range []string{reader.Key, evaluator.Key} {
				items := e.listAll("/api/v1/suites", key, 1)
				var got []suiteJSON
				for _, it := range items {
					var s suiteJSON
					if err := json.Unmarshal(it, &s); err != nil {
						t.Fatal(err)
					}
					got = append(got, s)
				}
				if len(got) != 2 || got[0].Name != "alpha" || got[1].Name != "refunds" {
					t.Fatalf("suites = %+v", got)
				}
				r := got[1]
				if r.LatestVersion != "4" || len(r.Versions) != 2 || r.Versions[0].Version != "4" || r.Versions[1].Version != "3" ||
					r.Versions[1].ContentSHA256 != v3.ContentSHA256 || r.Versions[0].Cases != 2 {
					t.Errorf("refunds = %+v", r)
				}
			}
			r := e.do(http.MethodGet, "/api/v1/suites/refunds/versions/4", evaluator.Key, nil)
			var doc suiteDocumentJSON
			decodeInto(t, r, &doc)
			if r.status != http.StatusOK || doc.Version != "4" || doc.ContentSHA256 != v4.ContentSHA256 || doc.Cases != 2 {
				t.Fatalf("GET version 4 = %d %s", r.status, r.body)
			}
			if h, err := jcs.Hash(doc.Document); err != nil || h != v4.ContentSHA256 {
				t.Errorf("document hashes to %s (%v), want the version's content hash %s", h, err, v4.ContentSHA256)
			}
			e.do(http.MethodGet, "/api/v1/suites/refunds/versions/5", reader.Key, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/suites/refunds/versions/3", otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/suites/refunds/versions/%2E%2E", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
			e.do(http.MethodGet, "/api/v1/suites/a%20b/versions/3", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
			e.do(http.MethodGet, "/api/v1/suites?cursor=bogus", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			if items := e.listAll("/api/v1/suites", otherAdmin, 10); len(items) != 0 {
				t.Errorf("another tenant lists %s", items)
			}
			e.uploadSuite(reader.Key, "application/yaml", refundsYAML).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			e.uploadSuite(evaluator.Key, "application/yaml", refundsYAML).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		})
	}
}

func TestTasks_TurnInputIsQuestionWhenSoleKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	e.mustUploadSuite("application/yaml", `name: q
cases:
  - id: plain
    input: {question: "Refund order 1042, it arrived broken."}
  - id: unicode
    input: {question: "  ¿Dónde está mi pedido? \u2028 <b>&</b>  "}
  - id: empty
    input: {question: ""}
`, http.StatusCreated)
	tasks := e.mustCreateTasks(`{"suite":"q"}`)
	want := map[string]string{
		"plain":   "Refund order 1042, it arrived broken.",
		"unicode": "  ¿Dónde está mi pedido? \u2028 <b>&</b>  ",
		"empty":   "",
	}
	if len(tasks.Items) != 3 {
		t.Fatalf("items = %+v", tasks.Items)
	}
	for _, it := range tasks.Items {
		if got := e.mustTask(it.TaskID).TurnInput; got != want[it.CaseID] {
			t.Errorf("case %s: turn_input = %q, want %q", it.CaseID, got, want[it.CaseID])
		}
	}
}

func TestTasks_TurnInputIsJCSOtherwise(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	tests := []struct {
		id, input, want string
	}{
		{"two-keys", `{"question":"q","locale":"en"}`, `{"locale":"en","question":"q"}`},
		{"not-a-string", `{"question":5}`, `{"question":5}`},
		{"null-question", `{"question":null}`, `{"question":null}`},
		{"other-key", `{"prompt":"q"}`, `{"prompt":"q"}`},
		{"empty", `{}`, `{}`},
		{"numbers-and-order", `{"b":1.50,"a":[1e2,"x\u00e9",true],"c":{"z":null,"y":-0.0}}`, `{"a":[100,"xé",true],"b":1.5,"c":{"y":0,"z":null}}`},
	}
	var cases []string
	for _, tc := range tests {
		cases = append(cases, `{"id":"`+tc.id+`","input":`+tc.input+`}`)
	}
	e.mustUploadSuite("application/json", `{"name":"jcs","cases":[`+strings.Join(cases, ",")+`]}`, http.StatusCreated)
	tasks := e.mustCreateTasks(`{"suite":"jcs"}`)
	for i, it := range tasks.Items {
		tc := tests[i]
		if it.CaseID != tc.id {
			t.Fatalf("item %d is case %s, want %s (case order)", i, it.CaseID, tc.id)
		}
		tv := e.mustTask(it.TaskID)
		if tv.TurnInput != tc.want {
			t.Errorf("%s: turn_input = %s, want %s", tc.id, tv.TurnInput, tc.want)
		}
		if string(tv.Input) != tc.want {
			t.Errorf("%s: input = %s, want its canonical form %s", tc.id, tv.Input, tc.want)
		}
	}
}

func TestTasks_FilesUnsupported(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			e.putFixture(e.admin, "invoice.pdf", "pdf")
			e.mustUploadSuite("application/yaml", `name: docs
cases:
  - id: ok
    input: {question: q}
  - id: also-ok
    input: {question: q}
  - id: with-file
    input: {question: q}
    files: [{name: invoice.pdf}]
`, http.StatusCreated)
			r := e.json(http.MethodPost, "/api/v1/tasks", e.admin, `{"suite":"docs"}`)
			r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeFilesUnsupported, "/cases/2/files")
			if items := e.listAll("/api/v1/tasks", e.admin, 50); len(items) != 0 {
				t.Errorf("a refused request created tasks: %s", items)
			}
		})
	}
}

func TestTasks_GradersFrozenAtCreation(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			first := e.mustCreateTasks(`{"suite":"refunds"}`)
			if first.Suite != "refunds" || first.Version != "3" || len(first.Items) != 2 {
				t.Fatalf("tasks = %+v", first)
			}
			byCase := map[string]taskView{}
			for _, it := range first.Items {
				byCase[it.CaseID] = e.mustTask(it.TaskID)
			}
			// Defaults extend the case's graders, unless graders_replace.
			wantGraders := map[string]string{
				"refund-small": `[{"max_llm_calls":20},{"contains":"refund"}]`,
				"refund-none":  `[{"not_contains":"refund"}]`,
			}
			for id, want := range wantGraders {
				if got := compactJSON(t, byCase[id].Graders); got != want {
					t.Errorf("%s graders = %s, want %s", id, got, want)
				}
				src := byCase[id].Source
				if src["kind"] != "suite" || src["suite"] != "refunds" || src["version"] != "3" {
					t.Errorf("%s source = %v", id, src)
				}
			}

			// A new version with other graders becomes the latest; tasks made
			// earlier keep theirs, new tasks get the new ones.
			v4 := strings.NewReplacer(`"3"`, `"4"`, "- contains: refund", "- icontains: REFUND", "max_llm_calls: 20", "max_llm_calls: 5").Replace(refundsYAML)
			e.mustUploadSuite("application/yaml", v4, http.StatusCreated)
			for id, tv := range byCase {
				if got := compactJSON(t, e.mustTask(tv.TaskID).Graders); got != wantGraders[id] {
					t.Errorf("%s graders after a new version = %s, want them frozen as %s", id, got, wantGraders[id])
				}
			}
			second := e.mustCreateTasks(`{"suite":"refunds"}`)
			if second.Version != "4" {
				t.Errorf("tasks without a version came from %s, want the latest, 4", second.Version)
			}
			if got := compactJSON(t, e.mustTask(second.Items[0].TaskID).Graders); got != `[{"max_llm_calls":5},{"icontains":"REFUND"}]` {
				t.Errorf("new task graders = %s", got)
			}
			// An explicit older version still makes tasks from it.
			old := e.mustCreateTasks(`{"suite":"refunds","version":"3"}`)
			if got := compactJSON(t, e.mustTask(old.Items[0].TaskID).Graders); old.Version != "3" || got != wantGraders["refund-small"] {
				t.Errorf("tasks of version 3 = %+v with graders %s", old, got)
			}
		})
	}
}

func TestTasks_CreateRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	_, otherAdmin := e.newTenant("other")
	e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
	tests := []struct {
		body   string
		status int
		code   string
		ptr    string
	}{
		{`{}`, 422, gyre.CodeInvalidBody, "/suite"},
		{`{"suite":null}`, 422, gyre.CodeInvalidBody, "/suite"},
		{`{"suite":""}`, 422, gyre.CodeInvalidBody, "/suite"},
		{`{"suite":"a/b"}`, 422, gyre.CodeInvalidBody, "/suite"},
		{`{"suite":7}`, 422, gyre.CodeInvalidBody, "/suite"},
		{`{"suite":"refunds","version":".."}`, 422, gyre.CodeInvalidBody, "/version"},
		{`{"suite":"refunds","extra":1}`, 422, gyre.CodeInvalidBody, "/extra"},
		{`{"suite":"nope"}`, 404, gyre.CodeNotFound, "/suite"},
		{`{"suite":"refunds","version":"9"}`, 404, gyre.CodeNotFound, "/version"},
	}
	for _, tc := range tests {
		e.json(http.MethodPost, "/api/v1/tasks", e.admin, tc.body).wantError(t, tc.status, tc.code, tc.ptr)
	}
	// Another tenant's suite is unknown.
	e.json(http.MethodPost, "/api/v1/tasks", otherAdmin, `{"suite":"refunds"}`).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "/suite")
	reader := e.createKey(e.admin, `{"role":"reader"}`)
	e.json(http.MethodPost, "/api/v1/tasks", reader.Key, `{"suite":"refunds"}`).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
	if items := e.listAll("/api/v1/tasks", e.admin, 50); len(items) != 0 {
		t.Errorf("refused requests created tasks: %s", items)
	}
}

func TestTasksFromTurns_ReplaysInputText(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			e.insertTurns(e.tenant.ID, "support-bot", []string{"t-1", "turn two ✓"}, map[string]*string{
				"t-1": textPtr("Refund order 1042"), "turn two ✓": textPtr(`{"question":"not unwrapped"}`),
			})
			r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin,
				`{"agent_id":"support-bot","turn_ids":["turn two ✓","t-1"],"graders":[{"contains":"refund"},{"tool_called":{"name":"issue_refund"}}]}`)
			if r.status != http.StatusCreated {
				t.Fatalf("from-turns: %d %s", r.status, r.body)
			}
			var items taskItems
			decodeInto(t, r, &items)
			if len(items.Items) != 2 || items.Items[0].CaseID != "turn two ✓" || items.Items[1].CaseID != "t-1" {
				t.Fatalf("items = %+v", items.Items)
			}
			want := map[string]string{"t-1": "Refund order 1042", "turn two ✓": `{"question":"not unwrapped"}`}
			for _, it := range items.Items {
				tv := e.mustTask(it.TaskID)
				if tv.TurnInput != want[it.CaseID] {
					t.Errorf("%s: turn_input = %q, want %q", it.CaseID, tv.TurnInput, want[it.CaseID])
				}
				if got := compactJSON(t, tv.Graders); got != `[{"contains":"refund"},{"tool_called":{"name":"issue_refund"}}]` {
					t.Errorf("%s: graders = %s", it.CaseID, got)
				}
				if tv.Source["kind"] != "turn" || tv.Source["agent_id"] != "support-bot" || tv.Source["turn_id"] != it.CaseID {
					t.Errorf("%s: source = %v", it.CaseID, tv.Source)
				}
			}
			// Empty graders are allowed: the tasks' rollouts go unscored.
			r = e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, `{"agent_id":"support-bot","turn_ids":["t-1"],"graders":[]}`)
			if r.status != http.StatusCreated {
				t.Errorf("empty graders: %d %s", r.status, r.body)
			}
		})
	}
}

func TestTasksFromTurns_NullInputText422(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			other, otherAdmin := e.newTenant("other")
			e.insertTurns(e.tenant.ID, "bot", []string{"a", "b", "no-input"}, map[string]*string{"a": textPtr("A"), "b": textPtr("B")})
			e.insertTurns(e.tenant.ID, "other-bot", []string{"c"}, map[string]*string{"c": textPtr("C")})
			e.insertTurns(other.ID, "bot", []string{"d"}, map[string]*string{"d": textPtr("D")})
			for _, tc := range []struct {
				key, ids, ptr, msg string
			}{
				{e.admin, `["a","no-input","b"]`, "/turn_ids/1", "input_text null"},
				{e.admin, `["a","b","never"]`, "/turn_ids/2", "no stored turn"},
				{e.admin, `["c"]`, "/turn_ids/0", "no stored turn"},     // another agent's turn
				{e.admin, `["a","d"]`, "/turn_ids/1", "no stored turn"}, // another tenant's turn
				{otherAdmin, `["a"]`, "/turn_ids/0", "no stored turn"},
			} {
				r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", tc.key, `{"agent_id":"bot","turn_ids":`+tc.ids+`,"graders":[]}`)
				r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, tc.ptr)
				if !strings.Contains(r.errorBody(t).Message, tc.msg) {
					t.Errorf("%s: message %q, want it to say %q", tc.ids, r.errorBody(t).Message, tc.msg)
				}
			}
			for _, key := range []string{e.admin, otherAdmin} {
				if items := e.listAll("/api/v1/tasks", key, 50); len(items) != 0 {
					t.Errorf("refused requests created tasks: %s", items)
				}
			}
		})
	}
}

func TestTasksFromTurns_BodyRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	many := `["` + strings.Repeat(`x","`, maxTurnTasks) + `x"]`
	tests := []struct {
		body, ptr string
	}{
		{`{"turn_ids":["a"],"graders":[]}`, "/agent_id"},
		{`{"agent_id":"","turn_ids":["a"],"graders":[]}`, "/agent_id"},
		{`{"agent_id":"..","turn_ids":["a"],"graders":[]}`, "/agent_id"},
		{`{"agent_id":"a/b","turn_ids":["a"],"graders":[]}`, "/agent_id"},
		{`{"agent_id":"bot","turn_ids":[],"graders":[]}`, "/turn_ids"},
		{`{"agent_id":"bot","turn_ids":` + many + `,"graders":[]}`, "/turn_ids"},
		{`{"agent_id":"bot","turn_ids":["a"," b"],"graders":[]}`, "/turn_ids/1"},
		{`{"agent_id":"bot","turn_ids":["a","b","a"],"graders":[]}`, "/turn_ids/2"},
		{`{"agent_id":"bot","turn_ids":["a",7],"graders":[]}`, "/turn_ids"},
		{`{"agent_id":"bot","turn_ids":["a"]}`, "/graders"},
		{`{"agent_id":"bot","turn_ids":["a"],"graders":null}`, "/graders"},
		{`{"agent_id":"bot","turn_ids":["a"],"graders":{"contains":"x"}}`, "/graders"},
		{`{"agent_id":"bot","turn_ids":["a"],"graders":[{"contains":"x"},{"containz":"y"}]}`, "/graders/1"},
		{`{"agent_id":"bot","turn_ids":["a"],"graders":[{"tool_called":{"nme":"x"}}]}`, "/graders/0/tool_called"},
		{`{"agent_id":"bot","turn_ids":["a"],"graders":[],"suite":"x"}`, "/suite"},
	}
	for _, tc := range tests {
		e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, tc.body).wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, tc.ptr)
	}
}

func TestTasks_ListAndGet(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, otherAdmin := e.newTenant("other")
			e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			e.mustUploadSuite("application/json", `{"name":"alpha","cases":[{"id":"a","input":{"question":"q"}}]}`, http.StatusCreated)
			e.insertTurns(e.tenant.ID, "bot", []string{"t"}, map[string]*string{"t": textPtr("hi")})
			var want, wantRefunds []string
			for range 3 {
				for _, it := range e.mustCreateTasks(`{"suite":"refunds"}`).Items {
					want = append(want, it.TaskID)
					wantRefunds = append(wantRefunds, it.TaskID)
				}
				for _, it := range e.mustCreateTasks(`{"suite":"alpha"}`).Items {
					want = append(want, it.TaskID)
				}
			}
			r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, `{"agent_id":"bot","turn_ids":["t"],"graders":[]}`)
			var fromTurn taskItems
			decodeInto(t, r, &fromTurn)
			want = append(want, fromTurn.Items[0].TaskID)

			ids := func(items []json.RawMessage) []string {
				var out []string
				for _, it := range items {
					var tv taskView
					if err := json.Unmarshal(it, &tv); err != nil {
						t.Fatal(err)
					}
					out = append(out, tv.TaskID)
				}
				return out
			}
			reader := e.createKey(e.admin, `{"role":"reader"}`)
			if diff := cmp.Diff(want, ids(e.listAll("/api/v1/tasks", reader.Key, 4))); diff != "" {
				t.Errorf("GET /api/v1/tasks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantRefunds, ids(e.listAll("/api/v1/tasks?suite=refunds", reader.Key, 5))); diff != "" {
				t.Errorf("GET /api/v1/tasks?suite=refunds (-want +got):\n%s", diff)
			}
			if items := e.listAll("/api/v1/tasks", otherAdmin, 50); len(items) != 0 {
				t.Errorf("another tenant lists %d tasks", len(items))
			}
			tv := e.mustTask(want[0])
			if tv.CaseID != "refund-small" || tv.TurnInput != "Refund order 1042, it arrived broken." || tv.CreatedAt == "" {
				t.Errorf("task = %+v", tv)
			}
			e.do(http.MethodGet, "/api/v1/tasks/"+want[0], otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/tasks/"+uuid.NewString(), reader.Key, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/tasks/not-a-uuid", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
			e.do(http.MethodGet, "/api/v1/tasks?suite=a%2Fb", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			e.do(http.MethodGet, "/api/v1/tasks?cursor=bogus", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			e.do(http.MethodGet, "/api/v1/tasks?limit=501", reader.Key, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
			agent := e.createKey(e.admin, `{"role":"agent"}`)
			e.do(http.MethodGet, "/api/v1/tasks", agent.Key, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		})
	}
}

// TestCatalog_TenantIsolation: no catalog route shows or uses another
// tenant's objects; they answer as if the objects did not exist.
func TestCatalog_TenantIsolation(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
			_, b := e.newTenant("b")
			e.putFixture(e.admin, "doc.pdf", "a's secret bytes")
			a := e.mustUploadSuite("application/yaml", refundsYAML, http.StatusCreated)
			task := e.mustCreateTasks(`{"suite":"refunds"}`).Items[0]

			e.do(http.MethodGet, "/api/fixtures/doc.pdf", b, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/fixtures/doc.pdf?sha256="+sha256Hex("a's secret bytes"), b, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/suites/refunds/versions/3", b, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/tasks/"+task.TaskID, b, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.json(http.MethodPost, "/api/v1/tasks", b, `{"suite":"refunds","version":"3"}`).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "/version")
			for _, path := range []string{"/api/v1/fixtures", "/api/v1/suites", "/api/v1/tasks"} {
				if items := e.listAll(path, b, 50); len(items) != 0 {
					t.Errorf("b lists %s: %s", path, items)
				}
			}
			// b's own uploads of the same names are new objects of b's.
			if r := e.putFixture(b, "doc.pdf", "a's secret bytes"); r.status != http.StatusCreated {
				t.Errorf("b's fixture put: %d", r.status)
			}
			r := e.uploadSuite(b, "application/yaml", refundsYAML)
			var got suiteAnswer
			decodeInto(t, r, &got)
			if r.status != http.StatusCreated || got != a {
				t.Errorf("b's suite upload = %d %+v, want 201 with the same content-derived answer", r.status, got)
			}
		})
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return b.String()
}
