package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// Datasets (SPEC §9): the frozen selection, its members and build state.
func runDatasets(t *testing.T, open Opener) {
	t.Run("DatasetFreezesVerdictSetsAtCreation", func(t *testing.T) { t.Parallel(); testDatasetFreezes(t, open) })
	t.Run("DatasetSelectsBySubmissionTimeAndBatch", func(t *testing.T) { t.Parallel(); testDatasetSelection(t, open) })
	t.Run("DatasetMembersPageInOrder", func(t *testing.T) { t.Parallel(); testDatasetMembersPage(t, open) })
	t.Run("DatasetUnknownAgentIsNotFound", func(t *testing.T) { t.Parallel(); testDatasetUnknownAgent(t, open) })
	t.Run("DatasetFinishesOnce", func(t *testing.T) { t.Parallel(); testDatasetFinishesOnce(t, open) })
	t.Run("DatasetProgressOnlyWhileBuilding", func(t *testing.T) { t.Parallel(); testDatasetProgress(t, open) })
	t.Run("DatasetsListAndTenantIsolation", func(t *testing.T) { t.Parallel(); testDatasetsList(t, open) })
	t.Run("DatasetsFilterByAgentStateAndCreationTime", func(t *testing.T) { t.Parallel(); testDatasetsFilter(t, open) })
	t.Run("BriefListIsTheListWithoutManifests", func(t *testing.T) { t.Parallel(); testDatasetsBriefList(t, open) })
}

func newDatasetID(t *testing.T) string {
	t.Helper()
	return uuid.Must(uuid.NewV7()).String()
}

func (f *rolloutFixture) dataset(t *testing.T, nd store.NewDataset) store.Dataset {
	t.Helper()
	if nd.ID == "" {
		nd.ID = newDatasetID(t)
	}
	if nd.TenantID == "" {
		nd.TenantID = f.tenant.ID
	}
	if nd.AgentID == "" {
		nd.AgentID = "agent-1"
	}
	if nd.Format == "" {
		nd.Format = "rl"
	}
	if nd.Filters == nil {
		nd.Filters = json.RawMessage(`{}`)
	}
	d, err := f.s.CreateDataset(t.Context(), nd)
	if err != nil {
		t.Fatalf("CreateDataset: %v", err)
	}
	return d
}

func (f *rolloutFixture) allMembers(t *testing.T, id string) []store.DatasetMember {
	t.Helper()
	var out []store.DatasetMember
	after := ""
	for {
		page, err := f.s.DatasetMembers(t.Context(), id, after, 2)
		if err != nil {
			t.Fatalf("DatasetMembers: %v", err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].RolloutID
	}
}

// submitN claims and submits n rollouts of the fixture's queued work, one
// clock second apart, and returns them in claim order.
func (f *rolloutFixture) submitN(t *testing.T, n int) []store.Rollout {
	t.Helper()
	var out []store.Rollout
	for i := range n {
		r, tok := f.claimOne(t, "ds"+time.Duration(i).String()+f.clk.Now().String())
		if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
			t.Fatalf("submit: %v", err)
		}
		out = append(out, r)
		f.clk.Advance(time.Second)
	}
	return out
}

// A dataset copies each member's current verdict set, training grade and
// reward: a regrade after creation (a new verdict set) changes the
// rollout, never the frozen member. Undecided rollouts are frozen pending
// (nil training grade), and so are ungraded ones (nil verdicts).
func testDatasetFreezes(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	f.batch(t, store.NewBatch{})
	rs := f.submitN(t, 3)
	grade := func(id, verdicts string, reward float64, reasons []string) {
		t.Helper()
		rec := "on_policy"
		g := store.GradeResult{RolloutID: id, Verdicts: json.RawMessage(verdicts),
			GraderVersions: json.RawMessage(`[{"name":"g"}]`), Outcome: "passed", Reward: &reward}
		if reasons != nil {
			g.Reconciliation, g.TrainingGrade, g.Reasons = &rec, len(reasons) == 0, reasons
		}
		if err := f.s.SaveGrade(t.Context(), g); err != nil {
			t.Fatalf("SaveGrade: %v", err)
		}
	}
	grade(rs[0].ID, `[{"grader":"g","score":0}]`, 0, []string{})
	grade(rs[0].ID, `[{"grader":"g","score":1}]`, 1, []string{}) // a regrade before creation: the latest counts
	grade(rs[1].ID, `[{"grader":"g","score":1}]`, 1, nil)        // graded, not reconciled: pending
	// rs[2] is submitted and ungraded.

	d := f.dataset(t, store.NewDataset{})
	if d.State != store.DatasetBuilding || d.Members != 3 || d.FileSHA256 != nil || d.Manifest != nil {
		t.Fatalf("new dataset = %+v, want building with 3 members and no file", d)
	}
	before := f.allMembers(t, d.ID)

	grade(rs[0].ID, `[{"grader":"g","score":0.25}]`, 0.25, []string{"off_policy"})
	grade(rs[1].ID, `[{"grader":"g","score":0}]`, 0, []string{})
	grade(rs[2].ID, `[{"grader":"g","score":1}]`, 1, []string{})

	after := f.allMembers(t, d.ID)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("members changed after a regrade (-before +after):\n%s", diff)
	}
	want := []store.DatasetMember{
		{Verdicts: json.RawMessage(`[{"grader":"g","score":1}]`), GraderVersions: json.RawMessage(`[{"name":"g"}]`),
			TrainingGrade: ptr(true), NotTrainingGrade: []string{}, Reward: ptr(1.0)},
		{Verdicts: json.RawMessage(`[{"grader":"g","score":1}]`), GraderVersions: json.RawMessage(`[{"name":"g"}]`),
			Reward: ptr(1.0)},
		{},
	}
	for i := range want {
		r := mustGet(t, f.s, f.tenant.ID, rs[i].ID)
		want[i].RolloutID, want[i].BatchID, want[i].TaskID, want[i].GroupID = r.ID, r.BatchID, r.TaskID, r.GroupID
	}
	slices.SortFunc(want, func(a, b store.DatasetMember) int { return cmpString(a.RolloutID, b.RolloutID) })
	normalize := func(ms []store.DatasetMember) []store.DatasetMember {
		out := slices.Clone(ms)
		for i := range out {
			if len(out[i].NotTrainingGrade) == 0 && out[i].TrainingGrade == nil {
				out[i].NotTrainingGrade = nil
			}
		}
		return out
	}
	if diff := cmp.Diff(want, normalize(before), jsonEqual()); diff != "" {
		t.Fatalf("frozen members (-want +got):\n%s", diff)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// jsonEqual compares raw JSON by value, as engines may re-space it.
func jsonEqual() cmp.Option {
	return cmp.Comparer(func(a, b json.RawMessage) bool {
		if a == nil || b == nil {
			return a == nil && b == nil
		}
		var x, y any
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			return false
		}
		return cmp.Equal(x, y)
	})
}

// The selection keeps the agent's submitted rollouts, submitted at or
// after since and before until, of the batches named; rollouts never
// submitted (queued, leased) and other agents' rollouts are not members.
func testDatasetSelection(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	b1, _ := f.batch(t, store.NewBatch{})
	rs := f.submitN(t, 2) // b1, at Start and Start+1s
	b2, _ := f.batch(t, store.NewBatch{})
	rs = append(rs, f.submitN(t, 1)...) // b2, at Start+2s; b2's second task stays queued
	f.batch(t, store.NewBatch{AgentID: "agent-2"})

	ids := func(d store.Dataset) []string {
		var out []string
		for _, m := range f.allMembers(t, d.ID) {
			out = append(out, m.RolloutID)
		}
		return out
	}
	sorted := func(rs ...store.Rollout) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	since, until := us(Start).Add(time.Second), us(Start).Add(2*time.Second)
	for _, tc := range []struct {
		name string
		nd   store.NewDataset
		want []string
	}{
		{"everything submitted", store.NewDataset{}, sorted(rs...)},
		{"since is inclusive", store.NewDataset{Since: &since}, sorted(rs[1], rs[2])},
		{"until is exclusive", store.NewDataset{Until: &until}, sorted(rs[0], rs[1])},
		{"both", store.NewDataset{Since: &since, Until: &until}, sorted(rs[1])},
		{"one batch", store.NewDataset{BatchIDs: []string{b2.ID}}, sorted(rs[2])},
		{"two batches", store.NewDataset{BatchIDs: []string{b1.ID, b2.ID}}, sorted(rs...)},
		{"an unknown batch", store.NewDataset{BatchIDs: []string{newDatasetID(t)}}, nil},
		{"no batches", store.NewDataset{BatchIDs: []string{}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := f.dataset(t, tc.nd)
			if got := ids(d); !slices.Equal(got, tc.want) || d.Members != len(tc.want) {
				t.Errorf("members = %v (count %d), want %v", got, d.Members, tc.want)
			}
		})
	}
}

// Members page by rollout id and, for dpo, by group then rollout id,
// with keyset pagination: every member exactly once, in order.
func testDatasetMembersPage(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	f.batch(t, store.NewBatch{GroupSize: 2})
	f.submitN(t, 6)
	d := f.dataset(t, store.NewDataset{})
	byID := f.allMembers(t, d.ID)
	if len(byID) != 6 || !slices.IsSortedFunc(byID, func(a, b store.DatasetMember) int { return cmpString(a.RolloutID, b.RolloutID) }) {
		t.Fatalf("members by id: %d, sorted %v", len(byID), byID)
	}
	var byGroup []store.DatasetMember
	g, r := "", ""
	for {
		page, err := f.s.DatasetGroupMembers(t.Context(), d.ID, g, r, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		byGroup = append(byGroup, page...)
		g, r = page[len(page)-1].GroupID, page[len(page)-1].RolloutID
	}
	key := func(m store.DatasetMember) string { return m.GroupID + "/" + m.RolloutID }
	if len(byGroup) != 6 || !slices.IsSortedFunc(byGroup, func(a, b store.DatasetMember) int { return cmpString(key(a), key(b)) }) {
		t.Fatalf("members by group: %d, not in (group, rollout) order", len(byGroup))
	}
	groups := map[string]int{}
	for _, m := range byGroup {
		groups[m.GroupID]++
	}
	if len(groups) != 3 {
		t.Fatalf("groups = %v, want 3 of 2", groups)
	}
}

// An agent never seen in the tenant is not found, and nothing is stored.
func testDatasetUnknownAgent(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	_, err := f.s.CreateDataset(t.Context(), store.NewDataset{ID: newDatasetID(t), TenantID: f.tenant.ID,
		AgentID: "nobody", Format: "sft", Filters: json.RawMessage(`{}`)})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CreateDataset(unknown agent) err = %v, want ErrNotFound", err)
	}
	if ds, _, err := f.s.ListDatasets(t.Context(), f.tenant.ID, store.Page{}); err != nil || len(ds) != 0 {
		t.Fatalf("after a refused create: %v %v", ds, err)
	}
}

// A build's outcome is recorded once: a second builder's outcome leaves
// the first in place; creation enqueues the build job.
func testDatasetFinishesOnce(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	d := f.dataset(t, store.NewDataset{})
	jobs, err := f.s.ClaimJobs(t.Context(), "w", []string{store.JobDatasetBuild}, 5, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].SubjectID != d.ID {
		t.Fatalf("build jobs = %+v, %v; want one for %s", jobs, err, d.ID)
	}
	ready := store.DatasetBuilt{ID: d.ID, State: store.DatasetReady, FileSHA256: "ab", FileBytes: 7,
		BlobKey: "datasets/x", Manifest: json.RawMessage(`{"rows":1}`)}
	got, err := f.s.FinishDataset(t.Context(), ready)
	if err != nil || got.State != store.DatasetReady || *got.FileSHA256 != "ab" || *got.FileBytes != 7 ||
		*got.BlobKey != "datasets/x" || got.BuiltAt == nil {
		t.Fatalf("FinishDataset(ready) = %+v, %v", got, err)
	}
	reason := "late"
	again, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: d.ID, State: store.DatasetFailed, Reason: &reason})
	if err != nil || again.State != store.DatasetReady || again.Reason != nil {
		t.Fatalf("a second outcome replaced the first: %+v, %v", again, err)
	}
	if _, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: newDatasetID(t), State: store.DatasetReady,
		Manifest: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FinishDataset(unknown) err = %v, want ErrNotFound", err)
	}
	d2 := f.dataset(t, store.NewDataset{})
	failed, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: d2.ID, State: store.DatasetFailed, Reason: &reason})
	if err != nil || failed.State != store.DatasetFailed || *failed.Reason != "late" || failed.Manifest != nil || failed.FileSHA256 != nil {
		t.Fatalf("FinishDataset(failed) = %+v, %v", failed, err)
	}
}

// Datasets list newest first, a page at a time, and never across tenants.
func testDatasetsList(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	var want []string
	for range 3 {
		want = append(want, f.dataset(t, store.NewDataset{}).ID)
	}
	slices.Reverse(want)
	var got []string
	cursor := ""
	for {
		page, next, err := f.s.ListDatasets(t.Context(), f.tenant.ID, store.Page{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			got = append(got, d.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("list = %v, want %v", got, want)
	}
	other := mustTenant(t, f.s, "other")
	if ds, _, err := f.s.ListDatasets(t.Context(), other.ID, store.Page{}); err != nil || len(ds) != 0 {
		t.Fatalf("another tenant lists %v, %v", ds, err)
	}
	if _, err := f.s.GetDataset(t.Context(), other.ID, want[0]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetDataset from another tenant err = %v, want ErrNotFound", err)
	}
	if d, err := f.s.GetDataset(t.Context(), f.tenant.ID, want[0]); err != nil || d.ID != want[0] {
		t.Fatalf("GetDataset = %+v, %v", d, err)
	}
}

// A filtered list keeps only the datasets of that agent, build state and
// creation window (since inclusive, until exclusive), pages within the
// filter, and refuses a cursor of another filter or an unknown state.
func testDatasetsFilter(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	f.batch(t, store.NewBatch{AgentID: "agent-2"})
	t0 := f.clk.Now()
	a1 := f.dataset(t, store.NewDataset{}) // agent-1, t0, building
	f.clk.Advance(time.Hour)
	a2 := f.dataset(t, store.NewDataset{AgentID: "agent-2"}) // t0+1h
	f.clk.Advance(time.Hour)
	b1 := f.dataset(t, store.NewDataset{}) // agent-1, t0+2h, ready
	if _, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: b1.ID, State: store.DatasetReady,
		FileSHA256: "ab", FileBytes: 1, BlobKey: "k", Manifest: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Hour)
	c1 := f.dataset(t, store.NewDataset{}) // agent-1, t0+3h
	reason := "boom"
	if _, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: c1.ID, State: store.DatasetFailed, Reason: &reason}); err != nil {
		t.Fatal(err)
	}
	list := func(flt store.DatasetFilter, limit int) []string {
		t.Helper()
		var got []string
		cursor := ""
		for {
			page, next, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, flt, store.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("FilterDatasets(%+v): %v", flt, err)
			}
			for _, d := range page {
				got = append(got, d.ID)
			}
			if next == "" {
				return got
			}
			cursor = next
		}
	}
	for _, tc := range []struct {
		name string
		f    store.DatasetFilter
		want []string
	}{
		{"no filter", store.DatasetFilter{}, []string{c1.ID, b1.ID, a2.ID, a1.ID}},
		{"agent", store.DatasetFilter{AgentID: "agent-1"}, []string{c1.ID, b1.ID, a1.ID}},
		{"other agent", store.DatasetFilter{AgentID: "agent-2"}, []string{a2.ID}},
		{"agent never seen", store.DatasetFilter{AgentID: "nobody"}, nil},
		{"building", store.DatasetFilter{State: store.DatasetBuilding}, []string{a2.ID, a1.ID}},
		{"ready", store.DatasetFilter{State: store.DatasetReady}, []string{b1.ID}},
		{"failed of agent-1", store.DatasetFilter{AgentID: "agent-1", State: store.DatasetFailed}, []string{c1.ID}},
		{"since is inclusive", store.DatasetFilter{Since: t0.Add(time.Hour)}, []string{c1.ID, b1.ID, a2.ID}},
		{"until is exclusive", store.DatasetFilter{Until: t0.Add(time.Hour)}, []string{a1.ID}},
		{"window", store.DatasetFilter{Since: t0.Add(time.Hour), Until: t0.Add(3 * time.Hour)}, []string{b1.ID, a2.ID}},
		{"agent, state and window", store.DatasetFilter{AgentID: "agent-1", State: store.DatasetBuilding, Since: t0, Until: t0.Add(time.Minute)}, []string{a1.ID}},
		{"empty window", store.DatasetFilter{Since: t0.Add(4 * time.Hour)}, nil},
	} {
		for _, limit := range []int{1, 50} {
			if got := list(tc.f, limit); !slices.Equal(got, tc.want) {
				t.Errorf("%s (pages of %d): %v, want %v", tc.name, limit, got, tc.want)
			}
		}
	}
	// An unfiltered cursor is ListDatasets' cursor.
	_, next, err := f.s.ListDatasets(t.Context(), f.tenant.ID, store.Page{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page, _, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, store.DatasetFilter{}, store.Page{Limit: 1, Cursor: next}); err != nil || len(page) != 1 || page[0].ID != b1.ID {
		t.Fatalf("ListDatasets' cursor in FilterDatasets: %v, %v", page, err)
	}
	if _, _, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, store.DatasetFilter{AgentID: "agent-1"}, store.Page{Limit: 1, Cursor: next}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Fatalf("a cursor of another filter: %v, want ErrInvalidCursor", err)
	}
	if _, _, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, store.DatasetFilter{State: "done"}, store.Page{}); err == nil {
		t.Fatal("an unknown state was accepted")
	}
	other := mustTenant(t, f.s, "other")
	if ds, _, err := f.s.FilterDatasets(t.Context(), other.ID, store.DatasetFilter{AgentID: "agent-1"}, store.Page{}); err != nil || len(ds) != 0 {
		t.Fatalf("another tenant lists %v, %v", ds, err)
	}
}

// The brief list holds the same datasets, pages and fields as the list,
// every manifest left out; its cursors are the list's.
func testDatasetsBriefList(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	built := f.dataset(t, store.NewDataset{})
	if _, err := f.s.FinishDataset(t.Context(), store.DatasetBuilt{ID: built.ID, State: store.DatasetReady, FileSHA256: "ab",
		FileBytes: 7, BlobKey: "datasets/x", Manifest: json.RawMessage(`{"rows":1,"rollout_ids":["r"]}`)}); err != nil {
		t.Fatal(err)
	}
	f.dataset(t, store.NewDataset{})
	f.dataset(t, store.NewDataset{})
	full, next, err := f.s.ListDatasets(t.Context(), f.tenant.ID, store.Page{Limit: 2})
	if err != nil || len(full) != 2 || next == "" {
		t.Fatalf("ListDatasets = %d datasets, next %q, %v", len(full), next, err)
	}
	brief, briefNext, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, store.DatasetFilter{}, store.Page{Limit: 2})
	if err != nil || briefNext != next {
		t.Fatalf("FilterDatasets next %q, %v; want the list's %q", briefNext, err, next)
	}
	rest, _, err := f.s.FilterDatasets(t.Context(), f.tenant.ID, store.DatasetFilter{}, store.Page{Limit: 2, Cursor: next})
	if err != nil || len(rest) != 1 || rest[0].ID != built.ID {
		t.Fatalf("brief page 2 = %+v, %v; want the built dataset", rest, err)
	}
	whole, err := f.s.GetDataset(t.Context(), f.tenant.ID, built.ID)
	if err != nil || whole.Manifest == nil {
		t.Fatalf("GetDataset = %+v, %v", whole, err)
	}
	if rest[0].Manifest != nil {
		t.Errorf("brief list carries a manifest: %s", rest[0].Manifest)
	}
	whole.Manifest = nil
	if diff := cmp.Diff(whole, rest[0]); diff != "" {
		t.Errorf("brief list item differs from the dataset beyond its manifest (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(full, brief); diff != "" {
		t.Errorf("brief page 1 differs from the list's (-want +got):\n%s", diff)
	}
	other := mustTenant(t, f.s, "other")
	if ds, _, err := f.s.FilterDatasets(t.Context(), other.ID, store.DatasetFilter{}, store.Page{}); err != nil || len(ds) != 0 {
		t.Errorf("another tenant lists %v, %v", ds, err)
	}
}
