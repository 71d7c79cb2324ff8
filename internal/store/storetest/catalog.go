package storetest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// runCatalog runs the conformance tests of the store's catalog: fixture
// revisions, suite versions and tasks.
func runCatalog(t *testing.T, open Opener) {
	t.Run("FixtureRevisions", func(t *testing.T) { t.Parallel(); testFixtureRevisions(t, open) })
	t.Run("FixtureRejects", func(t *testing.T) { t.Parallel(); testFixtureRejects(t, open) })
	t.Run("ListFixturesPages", func(t *testing.T) { t.Parallel(); testListFixturesPages(t, open) })
	t.Run("ConcurrentFixturePuts", func(t *testing.T) { t.Parallel(); testConcurrentFixturePuts(t, open) })
	t.Run("SuiteVersions", func(t *testing.T) { t.Parallel(); testSuiteVersions(t, open) })
	t.Run("SuiteVersionFixtures", func(t *testing.T) { t.Parallel(); testSuiteVersionFixtures(t, open) })
	t.Run("ConcurrentSuitePuts", func(t *testing.T) { t.Parallel(); testConcurrentSuitePuts(t, open) })
	t.Run("ListSuitesPages", func(t *testing.T) { t.Parallel(); testListSuitesPages(t, open) })
	t.Run("SuiteTasks", func(t *testing.T) { t.Parallel(); testSuiteTasks(t, open) })
	t.Run("SuiteTasksAtomic", func(t *testing.T) { t.Parallel(); testSuiteTasksAtomic(t, open) })
	t.Run("TurnTasks", func(t *testing.T) { t.Parallel(); testTurnTasks(t, open) })
	t.Run("TurnTasksRefused", func(t *testing.T) { t.Parallel(); testTurnTasksRefused(t, open) })
	t.Run("ListTasksPages", func(t *testing.T) { t.Parallel(); testListTasksPages(t, open) })
	t.Run("CatalogIsolation", func(t *testing.T) { t.Parallel(); testCatalogIsolation(t, open) })
}

// fixtureSum returns the lowercase hex SHA-256 of s.
func fixtureSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func mustPutFixture(t *testing.T, s store.Store, tenantID, name, content string) (store.Fixture, bool) {
	t.Helper()
	f, created, err := s.PutFixture(t.Context(), store.NewFixture{
		TenantID: tenantID, Name: name, SHA256: fixtureSum(content), SizeBytes: int64(len(content)),
	})
	if err != nil {
		t.Fatalf("PutFixture(%q, %q): %v", name, content, err)
	}
	return f, created
}

func testFixtureRevisions(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")

	a, created := mustPutFixture(t, s, tn.ID, "invoice.pdf", "A")
	want := store.Fixture{Name: "invoice.pdf", SHA256: fixtureSum("A"), SizeBytes: 1, CreatedAt: us(Start)}
	if diff := cmp.Diff(want, a); diff != "" || !created {
		t.Errorf("first put: created %v (-want +got):\n%s", created, diff)
	}
	clk.Advance(time.Second)
	again, created := mustPutFixture(t, s, tn.ID, "invoice.pdf", "A")
	if diff := cmp.Diff(want, again); diff != "" || created {
		t.Errorf("identical put: created %v, want false (-want +got):\n%s", created, diff)
	}

	// A new revision becomes the latest; the old one stays addressable.
	clk.Advance(time.Second)
	b, created := mustPutFixture(t, s, tn.ID, "invoice.pdf", "BB")
	if !created || b.SHA256 != fixtureSum("BB") || b.SizeBytes != 2 || !b.CreatedAt.Equal(us(clk.Now())) {
		t.Errorf("second revision = %+v, created %v", b, created)
	}
	latest, err := s.LatestFixture(ctx, tn.ID, "invoice.pdf")
	if err != nil || latest != b {
		t.Errorf("LatestFixture = %+v, %v; want %+v", latest, err, b)
	}
	old, err := s.FixtureRevision(ctx, tn.ID, "invoice.pdf", fixtureSum("A"))
	if err != nil || old != want {
		t.Errorf("FixtureRevision(old) = %+v, %v; want %+v", old, err, want)
	}

	// Putting the old content again makes it the latest again, keeping its
	// first creation time; it is not a new revision.
	clk.Advance(time.Second)
	back, created := mustPutFixture(t, s, tn.ID, "invoice.pdf", "A")
	if created || back != want {
		t.Errorf("re-put of the old revision = %+v, created %v; want %+v, false", back, created, want)
	}
	if latest, err := s.LatestFixture(ctx, tn.ID, "invoice.pdf"); err != nil || latest != want {
		t.Errorf("LatestFixture after re-put = %+v, %v; want %+v", latest, err, want)
	}
	// Several puts within one microsecond still order exactly.
	for _, c := range []string{"C", "D", "C", "E"} {
		mustPutFixture(t, s, tn.ID, "same-instant", c)
	}
	if latest, err := s.LatestFixture(ctx, tn.ID, "same-instant"); err != nil || latest.SHA256 != fixtureSum("E") {
		t.Errorf("LatestFixture(same-instant) = %+v, %v; want E", latest, err)
	}

	for _, tc := range []struct{ name, sha string }{
		{"nope.pdf", ""},
		{"invoice.pdf", fixtureSum("never")},
		{"INVOICE.pdf", fixtureSum("A")},
	} {
		if _, err := s.FixtureRevision(ctx, tn.ID, tc.name, tc.sha); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("FixtureRevision(%q, %q) error = %v, want ErrNotFound", tc.name, tc.sha, err)
		}
	}
	if _, err := s.LatestFixture(ctx, tn.ID, "nope.pdf"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestFixture(unknown) error = %v, want ErrNotFound", err)
	}
}

func testFixtureRejects(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	mustPutFixture(t, s, tn.ID, "a.txt", "hello")
	tests := []struct {
		name     string
		f        store.NewFixture
		sentinel error
	}{
		{"unknown tenant", store.NewFixture{TenantID: uuid.Must(uuid.NewV7()).String(), Name: "a.txt", SHA256: fixtureSum("x"), SizeBytes: 1}, store.ErrNotFound},
		{"empty name", store.NewFixture{TenantID: tn.ID, SHA256: fixtureSum("x"), SizeBytes: 1}, nil},
		{"dot-dot name", store.NewFixture{TenantID: tn.ID, Name: "..", SHA256: fixtureSum("x"), SizeBytes: 1}, nil},
		{"slash in name", store.NewFixture{TenantID: tn.ID, Name: "a/b", SHA256: fixtureSum("x"), SizeBytes: 1}, nil},
		{"uppercase sha", store.NewFixture{TenantID: tn.ID, Name: "b.txt", SHA256: "A" + fixtureSum("x")[1:], SizeBytes: 1}, nil},
		{"short sha", store.NewFixture{TenantID: tn.ID, Name: "b.txt", SHA256: "abc", SizeBytes: 1}, nil},
		{"negative size", store.NewFixture{TenantID: tn.ID, Name: "b.txt", SHA256: fixtureSum("x"), SizeBytes: -1}, nil},
		{"same digest, other size", store.NewFixture{TenantID: tn.ID, Name: "a.txt", SHA256: fixtureSum("hello"), SizeBytes: 6}, nil},
	}
	for _, tc := range tests {
		_, _, err := s.PutFixture(t.Context(), tc.f)
		switch {
		case err == nil:
			t.Errorf("%s: PutFixture succeeded, want an error", tc.name)
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.sentinel)
		case tc.sentinel == nil && (errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict)):
			t.Errorf("%s: error = %v, want a validation error", tc.name, err)
		}
	}
	got, _, err := s.ListFixtures(t.Context(), tn.ID, store.Page{})
	if err != nil || len(got) != 1 || got[0].SizeBytes != 5 {
		t.Errorf("fixtures after refused puts = %+v, %v; want only a.txt with 5 bytes", got, err)
	}
}

func testListFixturesPages(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("f-%02d.txt", 6-i) // put in reverse name order
		mustPutFixture(t, s, tn.ID, name, name+"-old")
		mustPutFixture(t, s, tn.ID, name, name+"-new")
		mustPutFixture(t, s, other.ID, name, "theirs")
		want = append([]string{name}, want...)
	}
	var got []store.Fixture
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 4 {
			t.Fatal("ListFixtures does not end")
		}
		page, next, err := s.ListFixtures(ctx, tn.ID, store.Page{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListFixtures: %v", err)
		}
		if len(page) > 3 || (next != "" && len(page) != 3) {
			t.Fatalf("page of %d with next %q", len(page), next)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	var names []string
	for _, f := range got {
		names = append(names, f.Name)
		if f.SHA256 != fixtureSum(f.Name+"-new") {
			t.Errorf("ListFixtures shows %s at %s, want its latest revision", f.Name, f.SHA256)
		}
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("ListFixtures names (-want +got):\n%s", diff)
	}
	for _, c := range []string{"garbage!", catalogCursor("suite:f-01.txt"), catalogCursor("fixture:../x"), catalogCursor("fixture:")} {
		if _, _, err := s.ListFixtures(ctx, tn.ID, store.Page{Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListFixtures(cursor %q) error = %v, want ErrInvalidCursor", c, err)
		}
	}
}

// testConcurrentFixturePuts: many puts of one new revision at once create
// it exactly once, and none fails.
func testConcurrentFixturePuts(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	const workers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for range workers {
		wg.Go(func() {
			_, c, err := s.PutFixture(t.Context(), store.NewFixture{TenantID: tn.ID, Name: "race.bin", SHA256: fixtureSum("race"), SizeBytes: 4})
			if err != nil {
				t.Errorf("PutFixture: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Errorf("%d concurrent puts reported created %d times, want once", workers, created)
	}
}

// suiteDoc is a small normalized suite document with n cases.
func suiteDoc(t *testing.T, name, version string, n int, fixtures map[string]string) (json.RawMessage, string) {
	t.Helper()
	doc := map[string]any{"name": name}
	if version != "" {
		doc["version"] = version
	}
	if len(fixtures) > 0 {
		doc["fixtures"] = fixtures
	}
	cases := make([]any, n)
	for i := range cases {
		cases[i] = map[string]any{"id": fmt.Sprintf("c%d", i), "input": map[string]any{"question": fmt.Sprintf("q%d", i)}}
	}
	doc["cases"] = cases
	raw, err := jcs.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := jcs.Hash(raw)
	if err != nil {
		t.Fatal(err)
	}
	return raw, h
}

func newSuiteVersion(t *testing.T, tenantID, name, version string, n int) store.NewSuiteVersion {
	t.Helper()
	doc, h := suiteDoc(t, name, version, n, nil)
	if version == "" {
		version = h
	}
	return store.NewSuiteVersion{TenantID: tenantID, Name: name, Version: version, ContentSHA256: h, Document: doc, Cases: n}
}

func mustPutSuite(t *testing.T, s store.Store, v store.NewSuiteVersion) (store.SuiteVersion, bool) {
	t.Helper()
	sv, created, err := s.PutSuiteVersion(t.Context(), v)
	if err != nil {
		t.Fatalf("PutSuiteVersion(%s %s): %v", v.Name, v.Version, err)
	}
	return sv, created
}

func testSuiteVersions(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")

	v3 := newSuiteVersion(t, tn.ID, "refunds", "3", 2)
	got, created := mustPutSuite(t, s, v3)
	want := store.SuiteVersion{Name: "refunds", Version: "3", ContentSHA256: v3.ContentSHA256, Document: v3.Document, Cases: 2, CreatedAt: us(Start)}
	if diff := cmp.Diff(want, got); diff != "" || !created {
		t.Errorf("first put: created %v (-want +got):\n%s", created, diff)
	}
	clk.Advance(time.Second)
	if got, created := mustPutSuite(t, s, v3); created || !cmp.Equal(want, got) {
		t.Errorf("identical put = %+v, created %v; want the stored version, false", got, created)
	}

	// The same explicit version with other content is a conflict that
	// changes nothing.
	other := newSuiteVersion(t, tn.ID, "refunds", "3", 5)
	if _, _, err := s.PutSuiteVersion(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Errorf("conflicting put error = %v, want ErrConflict", err)
	}
	if got, err := s.SuiteVersion(ctx, tn.ID, "refunds", "3"); err != nil || !cmp.Equal(want, got) {
		t.Errorf("SuiteVersion after a conflict = %+v, %v; want %+v", got, err, want)
	}

	// A version named by its content hash.
	clk.Advance(time.Second)
	hashed := newSuiteVersion(t, tn.ID, "refunds", "", 3)
	h, created := mustPutSuite(t, s, hashed)
	if !created || h.Version != hashed.ContentSHA256 || h.Cases != 3 {
		t.Errorf("hash-named version = %+v, created %v", h, created)
	}
	if latest, err := s.LatestSuiteVersion(ctx, tn.ID, "refunds"); err != nil || latest.Version != h.Version {
		t.Errorf("LatestSuiteVersion = %+v, %v; want %s", latest, err, h.Version)
	}
	// Re-putting version 3 makes it the latest again.
	clk.Advance(time.Second)
	mustPutSuite(t, s, v3)
	if latest, err := s.LatestSuiteVersion(ctx, tn.ID, "refunds"); err != nil || !cmp.Equal(want, latest) {
		t.Errorf("LatestSuiteVersion after re-put = %+v, %v; want version 3", latest, err)
	}

	for _, tc := range []struct{ name, version string }{{"refunds", "4"}, {"nope", "3"}, {"Refunds", "3"}} {
		if _, err := s.SuiteVersion(ctx, tn.ID, tc.name, tc.version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SuiteVersion(%q, %q) error = %v, want ErrNotFound", tc.name, tc.version, err)
		}
	}
	if _, err := s.LatestSuiteVersion(ctx, tn.ID, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSuiteVersion(unknown) error = %v, want ErrNotFound", err)
	}

	bad := []struct {
		name     string
		mutate   func(v *store.NewSuiteVersion)
		sentinel error
	}{
		{"unknown tenant", func(v *store.NewSuiteVersion) { v.TenantID = uuid.Must(uuid.NewV7()).String() }, store.ErrNotFound},
		{"bad name", func(v *store.NewSuiteVersion) { v.Name = "a b" }, nil},
		{"empty version", func(v *store.NewSuiteVersion) { v.Version = "" }, nil},
		{"bad hash", func(v *store.NewSuiteVersion) { v.ContentSHA256 = "xyz" }, nil},
		{"no cases", func(v *store.NewSuiteVersion) { v.Cases = 0 }, nil},
		{"document not JSON", func(v *store.NewSuiteVersion) { v.Document = json.RawMessage("{") }, nil},
	}
	for _, tc := range bad {
		v := newSuiteVersion(t, tn.ID, "fresh", "1", 1)
		tc.mutate(&v)
		_, _, err := s.PutSuiteVersion(ctx, v)
		switch {
		case err == nil:
			t.Errorf("%s: PutSuiteVersion succeeded", tc.name)
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.sentinel)
		case tc.sentinel == nil && (errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict)):
			t.Errorf("%s: error = %v, want a validation error", tc.name, err)
		}
	}
	if _, err := s.LatestSuiteVersion(ctx, tn.ID, "fresh"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused put stored something: %v", err)
	}
}

// testSuiteVersionFixtures: a version references fixture revisions that
// must exist, and later revisions never change what it references.
func testSuiteVersionFixtures(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	mustPutFixture(t, s, tn.ID, "invoice.pdf", "v1")
	mustPutFixture(t, s, other.ID, "theirs.pdf", "t1")

	refs := map[string]string{"invoice.pdf": fixtureSum("v1")}
	doc, h := suiteDoc(t, "docs", "", 1, refs)
	v := store.NewSuiteVersion{TenantID: tn.ID, Name: "docs", Version: h, ContentSHA256: h, Document: doc, Cases: 1, Fixtures: refs}
	sv, _ := mustPutSuite(t, s, v)

	mustPutFixture(t, s, tn.ID, "invoice.pdf", "v2")
	if got, err := s.SuiteVersion(ctx, tn.ID, "docs", sv.Version); err != nil || string(got.Document) != string(doc) {
		t.Errorf("version after a new fixture revision = %s, %v; want it unchanged", got.Document, err)
	}

	for name, refs := range map[string]map[string]string{
		"unknown revision":       {"invoice.pdf": fixtureSum("v3")},
		"unknown name":           {"missing.pdf": fixtureSum("v1")},
		"another tenant's":       {"theirs.pdf": fixtureSum("t1")},
		"one of two is unknown":  {"invoice.pdf": fixtureSum("v2"), "nope.pdf": fixtureSum("x")},
		"revision of other name": {"theirs.pdf": fixtureSum("v1")},
	} {
		doc, h := suiteDoc(t, "refs", "", 1, refs)
		_, _, err := s.PutSuiteVersion(ctx, store.NewSuiteVersion{TenantID: tn.ID, Name: "refs", Version: h, ContentSHA256: h, Document: doc, Cases: 1, Fixtures: refs})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: PutSuiteVersion error = %v, want ErrNotFound", name, err)
		}
	}
	if _, err := s.LatestSuiteVersion(ctx, tn.ID, "refs"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a version with a missing fixture was stored: %v", err)
	}
}

func testConcurrentSuitePuts(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	tn := mustTenant(t, s, "acme")
	v := newSuiteVersion(t, tn.ID, "race", "1", 1)
	const workers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for range workers {
		wg.Go(func() {
			_, c, err := s.PutSuiteVersion(t.Context(), v)
			if err != nil {
				t.Errorf("PutSuiteVersion: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Errorf("%d concurrent puts reported created %d times, want once", workers, created)
	}
}

func testListSuitesPages(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	if got, next, err := s.ListSuites(ctx, tn.ID, store.Page{}); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("ListSuites on an empty tenant = %v, %q, %v", got, next, err)
	}
	var want []store.Suite
	for i := range 5 {
		name := fmt.Sprintf("suite-%d", i)
		var versions []store.SuiteVersion
		for j := range i%3 + 1 {
			clk.Advance(time.Second)
			sv, _ := mustPutSuite(t, s, newSuiteVersion(t, tn.ID, name, fmt.Sprint(j), j+1))
			sv.Document = nil
			versions = append([]store.SuiteVersion{sv}, versions...) // latest first
		}
		mustPutSuite(t, s, newSuiteVersion(t, other.ID, name, "theirs", 1))
		want = append(want, store.Suite{Name: name, Versions: versions})
	}
	var got []store.Suite
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("ListSuites does not end")
		}
		page, next, err := s.ListSuites(ctx, tn.ID, store.Page{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListSuites: %v", err)
		}
		if next != "" && len(page) != 2 {
			t.Fatalf("page of %d with next %q", len(page), next)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListSuites (-want +got):\n%s", diff)
	}
	if _, _, err := s.ListSuites(ctx, tn.ID, store.Page{Cursor: catalogCursor("fixture:suite-1")}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("ListSuites(fixture cursor) error = %v, want ErrInvalidCursor", err)
	}
}

// suiteTasks returns n tasks for the cases of a suite version.
func suiteTasks(tenantID string, sv store.SuiteVersion, n int) store.SuiteTasks {
	st := store.SuiteTasks{TenantID: tenantID, SuiteName: sv.Name, SuiteVersion: sv.Version}
	for i := range n {
		st.Tasks = append(st.Tasks, store.NewTask{
			CaseID:    fmt.Sprintf("c%d", i),
			Input:     json.RawMessage(fmt.Sprintf(`{"question":"q%d"}`, i)),
			TurnInput: fmt.Sprintf("q%d", i),
			Graders:   json.RawMessage(`[{"contains":"refund"}]`),
		})
	}
	return st
}

func testSuiteTasks(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	sv, _ := mustPutSuite(t, s, newSuiteVersion(t, tn.ID, "refunds", "3", 3))
	req := suiteTasks(tn.ID, sv, 3)
	req.Tasks[2].Input = json.RawMessage(`{"a":1,"b":[true,null]}`)
	req.Tasks[2].TurnInput = `{"a":1,"b":[true,null]}`
	req.Tasks[2].Graders = json.RawMessage(`[]`)
	tasks, err := s.CreateSuiteTasks(ctx, req)
	if err != nil {
		t.Fatalf("CreateSuiteTasks: %v", err)
	}
	if len(tasks) != 3 {
		t.Fatalf("CreateSuiteTasks made %d tasks, want 3", len(tasks))
	}
	for i, task := range tasks {
		checkID(t, "task", task.ID)
		want := store.Task{
			ID: task.ID, CaseID: req.Tasks[i].CaseID, SuiteName: "refunds", SuiteVersion: "3",
			Input: req.Tasks[i].Input, TurnInput: req.Tasks[i].TurnInput, Graders: req.Tasks[i].Graders,
			CreatedAt: us(Start),
		}
		if diff := cmp.Diff(want, task); diff != "" {
			t.Errorf("task %d (-want +got):\n%s", i, diff)
		}
		got, err := s.Task(ctx, tn.ID, task.ID)
		if err != nil {
			t.Fatalf("Task: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Task %d (-want +got):\n%s", i, diff)
		}
	}
	// Tasks are frozen: a later version of the suite changes none of them.
	mustPutSuite(t, s, newSuiteVersion(t, tn.ID, "refunds", "4", 1))
	if got, err := s.Task(ctx, tn.ID, tasks[0].ID); err != nil || !cmp.Equal(tasks[0], got) {
		t.Errorf("task after a new suite version = %+v, %v", got, err)
	}

	for _, id := range []string{uuid.Must(uuid.NewV7()).String(), "", "not-a-uuid"} {
		if _, err := s.Task(ctx, tn.ID, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Task(%q) error = %v, want ErrNotFound", id, err)
		}
	}
	for name, tc := range map[string]store.SuiteTasks{
		"unknown version": {TenantID: tn.ID, SuiteName: "refunds", SuiteVersion: "9", Tasks: req.Tasks},
		"unknown suite":   {TenantID: tn.ID, SuiteName: "nope", SuiteVersion: "3", Tasks: req.Tasks},
	} {
		if _, err := s.CreateSuiteTasks(ctx, tc); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: CreateSuiteTasks error = %v, want ErrNotFound", name, err)
		}
	}
}

// testSuiteTasksAtomic: a refused call creates no task at all.
func testSuiteTasksAtomic(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	sv, _ := mustPutSuite(t, s, newSuiteVersion(t, tn.ID, "refunds", "3", 3))
	for name, mutate := range map[string]func(*store.SuiteTasks){
		"last task's graders not JSON": func(r *store.SuiteTasks) { r.Tasks[2].Graders = json.RawMessage("[") },
		"last task without case id":    func(r *store.SuiteTasks) { r.Tasks[2].CaseID = "" },
		"no tasks":                     func(r *store.SuiteTasks) { r.Tasks = nil },
	} {
		req := suiteTasks(tn.ID, sv, 3)
		mutate(&req)
		if _, err := s.CreateSuiteTasks(ctx, req); err == nil {
			t.Errorf("%s: CreateSuiteTasks succeeded", name)
		}
	}
	if got, _, err := s.ListTasks(ctx, tn.ID, store.TaskFilter{}, store.Page{}); err != nil || len(got) != 0 {
		t.Errorf("refused calls left %d tasks, %v; want none", len(got), err)
	}
}

// putCatalogTurns stores production turns of agentID; inputs maps turn id to its
// input_text (nil for null).
func putCatalogTurns(t *testing.T, s store.Store, tenantID, agentID string, ids []string, inputs map[string]*string) {
	t.Helper()
	var turns []store.NewTurn
	for _, id := range ids {
		body, err := json.Marshal(map[string]any{
			"turn_id": id, "input_text": inputs[id], "final_text": "done",
			"tool_calls": nil, "tool_calls_omitted_count": 0,
		})
		if err != nil {
			t.Fatal(err)
		}
		h, err := jcs.Hash(body)
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, store.NewTurn{TurnID: id, Body: body, SHA256: h})
	}
	if _, err := s.InsertTurns(t.Context(), tenantID, agentID, turns); err != nil {
		t.Fatalf("InsertTurns: %v", err)
	}
}

// textOf returns a pointer to s.
func textOf(s string) *string { return &s }

func testTurnTasks(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	putCatalogTurns(t, s, tn.ID, "support-bot", []string{"t-1", "t 2 ✓", "t-3"}, map[string]*string{
		"t-1": textOf("Refund order 1042"), "t 2 ✓": textOf(`{"not":"parsed"} <b>&`), "t-3": textOf(""),
	})
	clk.Advance(time.Minute)
	graders := json.RawMessage(`[{"contains":"refund"},{"max_llm_calls":3}]`)
	ids := []string{"t-3", "t-1", "t 2 ✓"}
	tasks, err := s.CreateTurnTasks(ctx, store.TurnTasks{TenantID: tn.ID, AgentID: "support-bot", TurnIDs: ids, Graders: graders})
	if err != nil {
		t.Fatalf("CreateTurnTasks: %v", err)
	}
	inputs := map[string]string{"t-1": "Refund order 1042", "t 2 ✓": `{"not":"parsed"} <b>&`, "t-3": ""}
	if len(tasks) != len(ids) {
		t.Fatalf("CreateTurnTasks made %d tasks, want %d", len(tasks), len(ids))
	}
	for i, task := range tasks {
		checkID(t, "task", task.ID)
		in, err := jcs.Marshal(map[string]string{"question": inputs[ids[i]]})
		if err != nil {
			t.Fatal(err)
		}
		want := store.Task{
			ID: task.ID, CaseID: ids[i], SourceAgentID: "support-bot", SourceTurnID: ids[i],
			Input: in, TurnInput: inputs[ids[i]], Graders: graders, CreatedAt: us(clk.Now()),
		}
		if diff := cmp.Diff(want, task); diff != "" {
			t.Errorf("task %d (-want +got):\n%s", i, diff)
		}
		if got, err := s.Task(ctx, tn.ID, task.ID); err != nil || !cmp.Equal(want, got) {
			t.Errorf("Task %d = %+v, %v; want %+v", i, got, err, want)
		}
	}
}

func testTurnTasksRefused(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	putCatalogTurns(t, s, tn.ID, "bot", []string{"ok-1", "ok-2", "null-input"}, map[string]*string{"ok-1": textOf("a"), "ok-2": textOf("b")})
	putCatalogTurns(t, s, tn.ID, "other-bot", []string{"theirs"}, map[string]*string{"theirs": textOf("x")})
	putCatalogTurns(t, s, other.ID, "bot", []string{"foreign"}, map[string]*string{"foreign": textOf("x")})
	graders := json.RawMessage(`[]`)

	refs := []struct {
		name  string
		ids   []string
		index int
		err   error
	}{
		{"null input_text", []string{"ok-1", "null-input", "ok-2"}, 1, store.ErrNoInputText},
		{"unknown turn", []string{"ok-1", "ok-2", "never"}, 2, store.ErrNotFound},
		{"another agent's turn", []string{"theirs"}, 0, store.ErrNotFound},
		{"another tenant's turn", []string{"ok-2", "foreign"}, 1, store.ErrNotFound},
	}
	for _, tc := range refs {
		_, err := s.CreateTurnTasks(ctx, store.TurnTasks{TenantID: tn.ID, AgentID: "bot", TurnIDs: tc.ids, Graders: graders})
		var re *store.TurnRefError
		if !errors.As(err, &re) || re.Index != tc.index || re.TurnID != tc.ids[tc.index] || !errors.Is(err, tc.err) {
			t.Errorf("%s: error = %v, want a TurnRefError at %d wrapping %v", tc.name, err, tc.index, tc.err)
		}
	}
	for name, req := range map[string]store.TurnTasks{
		"no turn ids":     {TenantID: tn.ID, AgentID: "bot", Graders: graders},
		"duplicate id":    {TenantID: tn.ID, AgentID: "bot", TurnIDs: []string{"ok-1", "ok-1"}, Graders: graders},
		"no agent":        {TenantID: tn.ID, TurnIDs: []string{"ok-1"}, Graders: graders},
		"graders invalid": {TenantID: tn.ID, AgentID: "bot", TurnIDs: []string{"ok-1"}, Graders: json.RawMessage("[")},
	} {
		if _, err := s.CreateTurnTasks(ctx, req); err == nil {
			t.Errorf("%s: CreateTurnTasks succeeded", name)
		}
	}
	if got, _, err := s.ListTasks(ctx, tn.ID, store.TaskFilter{}, store.Page{}); err != nil || len(got) != 0 {
		t.Errorf("refused calls left %d tasks, %v; want none (all or nothing)", len(got), err)
	}
}

func testListTasksPages(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	a, _ := mustPutSuite(t, s, newSuiteVersion(t, tn.ID, "a", "1", 1))
	b, _ := mustPutSuite(t, s, newSuiteVersion(t, tn.ID, "b", "1", 1))
	theirs, _ := mustPutSuite(t, s, newSuiteVersion(t, other.ID, "a", "1", 1))
	var all, onlyA []store.Task
	for i := range 4 {
		clk.Advance(time.Microsecond)
		ta, err := s.CreateSuiteTasks(ctx, suiteTasks(tn.ID, a, 2))
		if err != nil {
			t.Fatal(err)
		}
		tb, err := s.CreateSuiteTasks(ctx, suiteTasks(tn.ID, b, i%2+1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSuiteTasks(ctx, suiteTasks(other.ID, theirs, 1)); err != nil {
			t.Fatal(err)
		}
		all = append(append(all, ta...), tb...)
		onlyA = append(onlyA, ta...)
	}
	collect := func(f store.TaskFilter, size int) []store.Task {
		var got []store.Task
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("ListTasks does not end")
			}
			page, next, err := s.ListTasks(ctx, tn.ID, f, store.Page{Limit: size, Cursor: cursor})
			if err != nil {
				t.Fatalf("ListTasks: %v", err)
			}
			if next != "" && len(page) != size {
				t.Fatalf("page of %d with next %q", len(page), next)
			}
			got = append(got, page...)
			if next == "" {
				return got
			}
			cursor = next
		}
	}
	if diff := cmp.Diff(all, collect(store.TaskFilter{}, 3)); diff != "" {
		t.Errorf("ListTasks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(onlyA, collect(store.TaskFilter{Suite: "a"}, 4)); diff != "" {
		t.Errorf("ListTasks(suite a) (-want +got):\n%s", diff)
	}
	if got := collect(store.TaskFilter{Suite: "nope"}, 5); len(got) != 0 {
		t.Errorf("ListTasks(unknown suite) = %d tasks", len(got))
	}
	if _, _, err := s.ListTasks(ctx, tn.ID, store.TaskFilter{}, store.Page{Cursor: catalogCursor("key:" + all[0].ID)}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("ListTasks(key cursor) error = %v, want ErrInvalidCursor", err)
	}
}

// testCatalogIsolation: nothing of one tenant's catalog is visible to, or
// usable by, another.
func testCatalogIsolation(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	b := mustTenant(t, s, "b")
	mustPutFixture(t, s, a.ID, "doc.pdf", "a's")
	sv, _ := mustPutSuite(t, s, newSuiteVersion(t, a.ID, "refunds", "1", 1))
	tasks, err := s.CreateSuiteTasks(ctx, suiteTasks(a.ID, sv, 1))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := s.LatestFixture(ctx, b.ID, "doc.pdf"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestFixture(foreign) error = %v", err)
	}
	if _, err := s.FixtureRevision(ctx, b.ID, "doc.pdf", fixtureSum("a's")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FixtureRevision(foreign) error = %v", err)
	}
	if got, _, err := s.ListFixtures(ctx, b.ID, store.Page{}); err != nil || len(got) != 0 {
		t.Errorf("ListFixtures(b) = %v, %v", got, err)
	}
	// The same name and content in b is b's own, new revision.
	if _, created := mustPutFixture(t, s, b.ID, "doc.pdf", "a's"); !created {
		t.Error("b's first put of a name a also has was not created")
	}
	if _, err := s.SuiteVersion(ctx, b.ID, "refunds", "1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SuiteVersion(foreign) error = %v", err)
	}
	if _, err := s.LatestSuiteVersion(ctx, b.ID, "refunds"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSuiteVersion(foreign) error = %v", err)
	}
	if got, _, err := s.ListSuites(ctx, b.ID, store.Page{}); err != nil || len(got) != 0 {
		t.Errorf("ListSuites(b) = %v, %v", got, err)
	}
	if _, err := s.CreateSuiteTasks(ctx, suiteTasks(b.ID, sv, 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateSuiteTasks(foreign version) error = %v, want ErrNotFound", err)
	}
	if _, err := s.Task(ctx, b.ID, tasks[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Task(foreign) error = %v", err)
	}
	if got, _, err := s.ListTasks(ctx, b.ID, store.TaskFilter{}, store.Page{}); err != nil || len(got) != 0 {
		t.Errorf("ListTasks(b) = %v, %v", got, err)
	}
	// b's version with a's name and content conflicts with nothing.
	if _, created := mustPutSuite(t, s, newSuiteVersion(t, b.ID, "refunds", "1", 1)); !created {
		t.Error("b's version was not created")
	}
}

// catalogCursor forges a cursor in the stores' encoding, to check that
// cursors of other lists and malformed ones are refused.
func catalogCursor(raw string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}
