package ui

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
)

// A batch with no finished rollout has no training-grade yield yet: the
// lists, the overview and the batch page show a dash said to mean "no
// finished rollout yet", never 0/0; a batch with finished rollouts shows
// its share and its counts.
func TestYieldOverNoFinishedRolloutIsADashNotZeroOverZero(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{pages: pages, log: slog.New(slog.DiscardHandler)}
	render := func(page string, data any) string {
		w := httptest.NewRecorder()
		u.render(w, httptest.NewRequest("GET", "/ui/", nil), 200, page, view{Title: page, Data: data})
		return w.Body.String()
	}
	none := rowOf(store.BatchSummary{Batch: store.Batch{ID: "0190aaaa-0000-7000-8000-000000000001", AgentID: "bot"}, State: "running"})
	some := rowOf(store.BatchSummary{Batch: store.Batch{ID: "0190aaaa-0000-7000-8000-000000000002", AgentID: "bot"}, State: "finished", Finished: 4, TrainingGrade: 3})
	for _, tc := range []struct {
		name     string
		page     string
		data     any
		want     []string
		wantNone []string
	}{
		{"batches list, nothing finished", "batches", batchesData{Rows: []batchRow{none}},
			[]string{`title="no finished rollout yet"`, `<span class="visually-hidden">no finished rollout yet</span>`}, []string{"0/0", "— 0"}},
		{"batches list, some finished", "batches", batchesData{Rows: []batchRow{some}},
			[]string{"75.0%", "3/4"}, []string{"no finished rollout yet"}},
		{"overview, nothing finished", "overview", overviewData{Found: true, Agent: "bot", Recent: []batchRow{none}},
			[]string{`<span class="visually-hidden">no finished rollout yet</span>`, `<div class="k">no finished rollout yet</div>`}, []string{"0/0", "0 of 0 finished"}},
		{"overview, some finished", "overview", overviewData{Found: true, Agent: "bot", Finished: 4, TrainingGrade: 3, Recent: []batchRow{some}},
			[]string{"3 of 4 finished", "3/4"}, []string{"no finished rollout yet"}},
		{"batch page, nothing finished", "batch", batchData{Batch: none, Live: liveOf(none)},
			[]string{`<div class="k">no finished rollout yet</div>`}, []string{"0 of 0 finished"}},
	} {
		b := render(tc.page, tc.data)
		for _, w := range tc.want {
			if !strings.Contains(b, w) {
				t.Errorf("%s: lacks %q", tc.name, w)
			}
		}
		for _, w := range tc.wantNone {
			if strings.Contains(b, w) {
				t.Errorf("%s: shows %q", tc.name, w)
			}
		}
	}
}
