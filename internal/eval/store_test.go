package eval

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// storeEngine opens a fresh migrated store for one test.
type storeEngine struct {
	name string
	open func(t *testing.T) store.Store
}

var storeEngines = []storeEngine{
	{"sqlite", func(t *testing.T) store.Store {
		return openTestStore(t, storeopen.Options{DataDir: t.TempDir()})
	}},
	{"postgres", func(t *testing.T) store.Store {
		url := storetest.PostgresURL(t)
		schema := storetest.NewPostgresSchema(t, url)
		return openTestStore(t, storeopen.Options{DB: storetest.SearchPathURL(t, url, schema)})
	}},
}

func openTestStore(t *testing.T, o storeopen.Options) store.Store {
	t.Helper()
	o.Clock, o.Migrate = clock.Real{}, true
	st, err := storeopen.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestStoreRecorder runs experiments into the embedded store of both
// engines, over real HTTP: records, blobs, resume, and a workspace
// listing that tries to escape (nothing is written outside the store).
func TestStoreRecorder(t *testing.T) {
	t.Parallel()
	for _, eng := range storeEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			st := eng.open(t)
			root := t.TempDir()
			blobDir := filepath.Join(root, "blobs")
			blobs, err := blobstore.Open(t.Context(), "file://"+blobDir, "")
			if err != nil {
				t.Fatal(err)
			}
			defer blobs.Close()
			tn, err := st.CreateTenant(t.Context(), "acme")
			if err != nil {
				t.Fatal(err)
			}

			h := newFakeHarness(t, `{"agent":"bot","revision":"r1","accepts":{"files":true},"provides":{"trajectory":true,"tool_calls":true,"workspace":true}}`)
			h.Files = func(string) string {
				return `{"files":[{"path":"../../evil","size":4},{"path":"/tmp/passwd","size":4},{"path":"out/ok.txt","size":2}]}`
			}
			h.File = func(_, p string) (int, string) {
				if p == "out/ok.txt" {
					return 200, "ok"
				}
				return 200, "evil"
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			s := writeSuite(t, `name: refunds
version: "1"
defaults: {repetitions: 2}
cases:
  - id: small
    input: {question: "Refund order 1042"}
    files: [{name: invoice.pdf, context: "the invoice"}]
    graders:
      - contains: "Refund"
      - tool_called: {name: issue_refund, args: {order_id: "1042"}}
`, map[string]string{"invoice.pdf": "%PDF invoice"})

			rec := &StoreRecorder{Store: st, Blobs: blobs, Tenant: tn.ID}
			fixtures := &Fixtures{Tenant: tn.ID, Dir: s.FixturesDir, Blobs: blobs}
			newRunner := func(cfg Config) *Runner {
				c, err := NewClient(srv.URL, "k", nil, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Criteria = DefaultCriteria()
				r, err := NewRunner(cfg, Deps{Client: c, Recorder: rec, Fixtures: fixtures})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			res, err := newRunner(Config{}).Run(t.Context(), s)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != ExitOK || res.Report.Passed != 2 {
				t.Fatalf("exit %d, report %+v", res.ExitCode, res.Report.Summary)
			}

			// The experiment and its runs are in the store.
			e, err := st.Experiment(t.Context(), tn.ID, res.Experiment.ID)
			if err != nil || e.Model != "m1" || e.FinishedAt == nil || !strings.Contains(string(e.Summary), `"passed":2`) {
				t.Fatalf("experiment = %+v, %v", e, err)
			}
			runs, _, err := st.ListRuns(t.Context(), tn.ID, e.ID, store.Page{})
			if err != nil || len(runs) != 2 {
				t.Fatalf("runs = %d, %v", len(runs), err)
			}
			for _, r := range runs {
				if r.Classification != "passed" || r.TrajectorySHA256 == "" || r.LatencyMS == nil || r.FinishedAt == nil {
					t.Errorf("run %+v", r)
				}
				if _, err := st.BlobRef(t.Context(), tn.ID, r.TrajectorySHA256); err != nil {
					t.Errorf("trajectory blob ref: %v", err)
				}
				rc, err := blobs.GetContent(t.Context(), "blobs/"+tn.ID+"/"+r.TrajectorySHA256, r.TrajectorySHA256)
				if err != nil {
					t.Fatalf("trajectory blob: %v", err)
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil || string(b) != validTrajectory {
					t.Errorf("stored trajectory = %q, %v", b, err)
				}
				files := decodeJSON[[]FileRecord](t, r.Files)
				if len(files) != 3 || files[2].SHA256 == nil || files[0].Error == nil || files[1].Error == nil {
					t.Errorf("files = %s", r.Files)
				}
			}
			// The fixture went to the harness as a multipart part, read
			// back from fixtures/<tenant>/<sha256>.
			creates, _, _, _ := h.snapshot()
			if len(creates) != 2 || len(creates[0].Parts) != 1 || creates[0].Parts[0].Body != "%PDF invoice" {
				t.Errorf("creates = %+v", creates)
			}

			// Nothing was written outside the blob store's content keys,
			// and no harness-chosen name became a file.
			keyRE := regexp.MustCompile(`^(fixtures|blobs)/` + regexp.QuoteMeta(tn.ID) + `/[0-9a-f]{64}(\.attrs)?$`)
			err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if strings.Contains(d.Name(), "evil") || strings.Contains(d.Name(), "passwd") {
					t.Errorf("a harness path became a file: %s", p)
				}
				if d.IsDir() {
					return nil
				}
				rel, _ := filepath.Rel(blobDir, p)
				if !keyRE.MatchString(filepath.ToSlash(rel)) {
					t.Errorf("unexpected file %s", rel)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, "..", "evil")); err == nil {
				t.Error("../evil was written")
			}

			// A resume of the finished experiment creates nothing new.
			res2, err := newRunner(Config{Resume: e.ID}).Run(t.Context(), s)
			if err != nil || res2.Report.Passed != 2 {
				t.Fatalf("resume: %v %+v", err, res2)
			}
			if c, _, _, _ := h.snapshot(); len(c) != 2 {
				t.Errorf("resume created runs: %d", len(c))
			}
			if got, err := rec.Runs(t.Context(), e.ID); err != nil || len(got) != 2 {
				t.Errorf("Runs = %d, %v", len(got), err)
			}
		})
	}
}

// TestFixturesFromDir serves signed URLs from the suite's fixtures
// directory (server mode, no blob store) and refuses bytes that changed
// since the suite was loaded.
func TestFixturesFromDir(t *testing.T) {
	t.Parallel()
	s := writeSuite(t, filesSuite, fixtureFiles)
	fx := &Fixtures{Tenant: "server", Dir: s.FixturesDir}
	srv := httptest.NewServer(fx.Handler())
	defer srv.Close()
	signer, err := NewFixtureSigner(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.Signer = signer
	if err := fx.Prepare(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	file := s.Cases[0].Files[0]
	u, err := fx.URL(file, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != fixtureFiles["invoice.pdf"] {
		t.Fatalf("GET = %d %q", code, body)
	}
	if err := os.WriteFile(filepath.Join(s.FixturesDir, "invoice.pdf"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := get(); code == 200 && body == "changed" {
		t.Error("changed bytes were served whole")
	}
	rc, err := fx.Open(t.Context(), file)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "changed since the suite was loaded") {
		t.Errorf("reading changed bytes: %v", err)
	}
}

// TestStoreRecorderAllRunsPages checks, on both engines, that AllRuns
// yields every record across pages, in order, stops when asked, and that
// a report built from it counts every run.
func TestStoreRecorderAllRunsPages(t *testing.T) {
	t.Parallel()
	for _, eng := range storeEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			st := eng.open(t)
			tn, err := st.CreateTenant(t.Context(), "acme")
			if err != nil {
				t.Fatal(err)
			}
			rec := &StoreRecorder{Store: st, Tenant: tn.ID}
			e, err := rec.CreateExperiment(t.Context(), store.NewExperiment{Suite: "s", SuiteVersion: "1", Harness: "h", Capabilities: []byte(`{"agent":"a"}`)})
			if err != nil {
				t.Fatal(err)
			}
			const n = runPage + 3
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					class := "passed"
					if i%2 == 1 {
						class = "failed"
					}
					if err := rec.PutRun(t.Context(), store.RunRecord{ExperimentID: e.ID, CaseID: fmt.Sprintf("c-%04d", i/2), Repetition: i%2 + 1, Classification: class, Model: "m"}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			i := 0
			for r, err := range rec.AllRuns(t.Context(), e.ID) {
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("c-%04d", i/2); r.CaseID != want || r.Repetition != i%2+1 {
					t.Fatalf("record %d is %s#%d, want %s#%d", i, r.CaseID, r.Repetition, want, i%2+1)
				}
				i++
			}
			if i != n {
				t.Errorf("AllRuns yielded %d records, want %d", i, n)
			}
			seen := 0
			for range rec.AllRuns(t.Context(), e.ID) {
				if seen++; seen == 3 {
					break
				}
			}
			rep, err := ReportFrom(t.Context(), rec, e)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Runs != n || rep.Passed != (n+1)/2 || rep.Failed != n/2 || len(rep.CaseResults) != (n+1)/2 {
				t.Errorf("report %+v with %d case results, want %d runs", rep.Summary, len(rep.CaseResults), n)
			}
		})
	}
}
