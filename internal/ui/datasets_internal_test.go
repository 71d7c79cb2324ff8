package ui

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// The create form's dates: an RFC 3339 time as given; a day as its start
// for since and as the next day's start for until, so the day is
// included; anything else names its field.
func TestCreateFormDatesIncludeTheUntilDay(t *testing.T) {
	t.Parallel()
	day := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	for _, tc := range []struct {
		name         string
		since, until string
		wantSince    time.Time
		wantUntil    time.Time
		wantErr      string
	}{
		{"days", "2026-11-01", "2026-11-30", day("2026-11-01T00:00:00Z"), day("2026-12-01T00:00:00Z"), ""},
		{"times as given", "2026-11-01T10:00:00+02:00", "2026-11-30T12:30:00Z", day("2026-11-01T08:00:00Z"), day("2026-11-30T12:30:00Z"), ""},
		{"bad since", "01/11/2026", "", time.Time{}, time.Time{}, "/since"},
		{"bad until", "", "tomorrow", time.Time{}, time.Time{}, "/until"},
	} {
		req, err := requestOf(datasetForm{Agent: "a", Format: "sft", Since: tc.since, Until: tc.until})
		if tc.wantErr != "" {
			ge, ok := err.(*gyre.Error)
			if !ok || ge.Pointer != tc.wantErr {
				t.Errorf("%s: %v, want an error at %s", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !req.Filters.Since.Equal(tc.wantSince) || !req.Filters.Until.Equal(tc.wantUntil) {
			t.Errorf("%s: since %v until %v (%v), want %v and %v", tc.name, req.Filters.Since, req.Filters.Until, err, tc.wantSince, tc.wantUntil)
		}
	}
}

// Blank fields are absent (the defaults apply), not zero; batch ids split
// on spaces, commas and lines; numbers that are not numbers name their
// field.
func TestCreateFormBlankIsAbsentNotZero(t *testing.T) {
	t.Parallel()
	req, err := requestOf(datasetForm{Agent: "a", Format: "dpo", BatchIDs: " a, b\nc "})
	if err != nil || req.Filters.MinReward != nil || req.Filters.MinMargin != nil || req.Filters.Since != nil ||
		strings.Join(req.Filters.BatchIDs, "|") != "a|b|c" || req.Filters.IncludeHoldout {
		t.Errorf("blank form: %+v (%v)", req.Filters, err)
	}
	if req, _ := requestOf(datasetForm{Agent: "a", Format: "dpo"}); req.Filters.BatchIDs != nil {
		t.Errorf("no batch ids gave %#v, want nil (every batch)", req.Filters.BatchIDs)
	}
	req, err = requestOf(datasetForm{MinReward: "0", MinMargin: "0.25", IncludeHoldout: true})
	if err != nil || *req.Filters.MinReward != 0 || *req.Filters.MinMargin != 0.25 || !req.Filters.IncludeHoldout {
		t.Errorf("filled form: %+v (%v)", req.Filters, err)
	}
	for field, f := range map[string]datasetForm{"/min_reward": {MinReward: "high"}, "/min_margin": {MinMargin: "1,5"}} {
		if _, err := requestOf(f); err == nil || err.(*gyre.Error).Pointer != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// Every reason code a manifest or a promotion can carry is explained on
// the page, not sent to the docs.
func TestEveryReasonCodeHasAMeaning(t *testing.T) {
	t.Parallel()
	for _, code := range []string{dataset.ReasonPending, dataset.ReasonHeldOut, dataset.ReasonNotTrainingGrade, dataset.ReasonBelowMinReward,
		dataset.ReasonNoPair, dataset.ReasonNoDivergentAssistantTurn, dataset.ReasonFormatInvalid + "tool_arguments_json",
		grade.NotGradeExcluded + "substrate_unavailable", grade.NotGradeState + "abandoned", grade.NotGradeToolCallsNotReported,
		grade.NotGradeToolCallsOmitted, grade.NotGradeLLMCallCountNotReported, grade.NotGradeOffPolicy, grade.NotGradeUnreconciled + "gateway_records_lost",
		grade.NotGradeReconciliationPending, grade.NotGradeLateSubmission, grade.NotGradeLeaseLapsed, grade.NotGradeNoVerdict,
		grade.NotGradeNoCompletions, grade.NotGradeBodiesNotCaptured} {
		if m := reasonMeaningOf(code); strings.HasPrefix(m, "see ") {
			t.Errorf("dataset reason %s has no meaning", code)
		}
	}
	for _, code := range []string{"delta_below_min", "task_regressed:0190", "excluded_rate_high:candidate", "no_graded_tasks", "deadline", "cancelled", "baseline_changed"} {
		if m := promotionReasonMeaning(code); strings.HasPrefix(m, "see ") {
			t.Errorf("promotion reason %s has no meaning", code)
		}
	}
}

// A building dataset's page shows its progress and polls for more; a
// ready one does not poll.
func TestBuildingDatasetShowsProgressAndRefreshes(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{pages: pages, log: slog.New(slog.DiscardHandler)}
	d := store.Dataset{ID: "01a2336d-3df9-7d8c-9f7c-3ddf039c2a8e", AgentID: "bot", Format: "sft", State: store.DatasetBuilding,
		Members: 10, Progress: &store.DatasetProgress{Rollouts: 4, Rows: 3}}
	render := func(d store.Dataset) string {
		w := httptest.NewRecorder()
		u.render(w, httptest.NewRequest("GET", "/ui/datasets/"+d.ID, nil), 200, "dataset",
			view{Title: "Dataset", Data: datasetView{D: d, Live: liveDataset(d)}})
		return w.Body.String()
	}
	b := render(d)
	for _, want := range []string{`<progress max="10" value="4"`, "4 of 10 read", "3 rows written", `hx-get="/ui/datasets/` + d.ID + `/live"`, "once the file is built"} {
		if !strings.Contains(b, want) {
			t.Errorf("building page lacks %q", want)
		}
	}
	d.Progress = nil
	if b := render(d); !strings.Contains(b, "waiting for a builder") {
		t.Error("a build not started yet is not said to be queued")
	}
	reason := "blob store unavailable"
	d.State, d.Reason = store.DatasetFailed, &reason
	if b := render(d); strings.Contains(b, "hx-get") || !strings.Contains(b, "The build failed: blob store unavailable") {
		t.Errorf("failed page polls or hides its reason")
	}
}

// The dataset page decodes only the rollout ids it links, from the start
// of the manifest's array; the rest stay undecoded.
func TestDatasetPageDecodesOnlyTheRolloutIDsItLinks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		n         int
		want      []string
		err       bool
	}{
		{"absent", ``, 2, nil, false},
		{"null", `null`, 2, nil, false},
		{"empty", `[]`, 2, nil, false},
		{"fewer than n", `["a"]`, 2, []string{"a"}, false},
		{"the first n of more", `["a","b","c"]`, 2, []string{"a", "b"}, false},
		{"not an array", `{"a":1}`, 2, nil, true},
		{"not strings", `[1]`, 2, nil, true},
	} {
		got, err := firstStrings([]byte(tc.raw), tc.n)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s: firstStrings = %q, %v; want %q, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	var pm pageManifest
	if err := json.Unmarshal([]byte(`{"rows":3,"rollouts_selected":3,"rollout_ids":["a","b","c"]}`), &pm); err != nil {
		t.Fatal(err)
	}
	if pm.Rows != 3 || pm.Manifest.RolloutIDs != nil || string(pm.RolloutIDs) != `["a","b","c"]` {
		t.Errorf("pageManifest = %+v, raw ids %s; want the counts decoded and the ids left raw", pm.Manifest, pm.RolloutIDs)
	}
}

// The dataset page states min_reward and min_margin the way the API does
// (0, 0.5, 1: the number as given, never padded to 0.000), and a dash only
// when the setting is absent and its default applies.
func TestDatasetPageStatesMinimumsAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{pages: pages, log: slog.New(slog.DiscardHandler)}
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name                string
		minReward, minMarg  *float64
		wantReward, wantMrg string
	}{
		{"zero", f(0), f(0), `<dt>Minimum reward</dt><dd><span class="mono">0</span>`, `<dt>Minimum margin</dt><dd><span class="mono">0</span>`},
		{"one and a half", f(1), f(0.5), `<dt>Minimum reward</dt><dd><span class="mono">1</span>`, `<dt>Minimum margin</dt><dd><span class="mono">0.5</span>`},
		{"fine", f(0.125), f(1e-7), `<dt>Minimum reward</dt><dd><span class="mono">0.125</span>`, `<dt>Minimum margin</dt><dd><span class="mono">1e-7</span>`},
		{"absent", nil, nil, `<dt>Minimum reward</dt><dd><span class="muted">— (not set: the default, 1, applies)`, `<dt>Minimum margin</dt><dd><span class="muted">— (not set: the default, 0.5, applies)`},
	} {
		d := store.Dataset{ID: "01a2336d-3df9-7d8c-9f7c-3ddf039c2a8e", AgentID: "bot", Format: "sft", State: store.DatasetReady}
		w := httptest.NewRecorder()
		u.render(w, httptest.NewRequest("GET", "/ui/datasets/"+d.ID, nil), 200, "dataset",
			view{Title: "Dataset", Data: datasetView{D: d, Live: liveDataset(d), Filters: dataset.Filters{MinReward: tc.minReward, MinMargin: tc.minMarg}}})
		b := w.Body.String()
		for _, want := range []string{tc.wantReward, tc.wantMrg} {
			if !strings.Contains(b, want) {
				t.Errorf("%s: lacks %q", tc.name, want)
			}
		}
		if strings.Contains(b, "0.000") || strings.Contains(b, "1.000") {
			t.Errorf("%s: pads a minimum to three decimals", tc.name)
		}
	}
}
