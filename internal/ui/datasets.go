package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/ui/chart"
)

// DatasetBuilder is what the UI needs of the dataset builder: to build an
// empty selection at once and to wake the builder for the others, as the
// API does (SPEC §9).
type DatasetBuilder interface {
	Build(ctx context.Context, id string) error
	Wake()
}

// datasetsPage is how many datasets the list shows a page.
const datasetsPage = 25

// manifestRollouts is how many of a dataset's rollout ids its page links;
// the manifest download lists them all.
const manifestRollouts = 50

// datasetForm is the create form as the user filled it in.
type datasetForm struct {
	Agent, Format, Since, Until, MinReward, MinMargin, BatchIDs string
	IncludeHoldout                                              bool
}

type datasetsData struct {
	Rows         []store.Dataset
	Cursor, Next string
	// The create form (admins only): its choices, values and error.
	Agents  []string
	Formats []dataset.Format
	Form    datasetForm
	Error   string
}

// datasets is GET /ui/datasets?cursor: the tenant's datasets, newest
// first, and the create form for admins.
func (u *UI) datasets(w http.ResponseWriter, r *http.Request, s session) error {
	return u.showDatasets(w, r, s, http.StatusOK, datasetForm{Format: string(dataset.FormatSFT)}, "")
}

func (u *UI) showDatasets(w http.ResponseWriter, r *http.Request, s session, status int, form datasetForm, msg string) error {
	d := datasetsData{Cursor: r.URL.Query().Get("cursor"), Formats: dataset.Formats, Form: form, Error: msg}
	var err error
	if d.Rows, d.Next, err = u.store.ListDatasetsBrief(r.Context(), s.TenantID, store.Page{Limit: datasetsPage, Cursor: d.Cursor}); err != nil {
		return err
	}
	if s.Admin() {
		agents, err := u.store.AgentsSeen(r.Context(), s.TenantID, maxAgents)
		if err != nil {
			return err
		}
		for _, a := range agents {
			d.Agents = append(d.Agents, a.AgentID)
		}
	}
	u.render(w, r, status, "datasets", view{Title: "Datasets", Nav: "datasets", Session: s, Data: d})
	return nil
}

// requestOf reads the create form into a dataset request. Dates are
// RFC 3339 times or whole UTC days: since a day is its start, until a day
// is the start of the next one, so both days are included.
func requestOf(f datasetForm) (build.Request, error) {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	req := build.Request{AgentID: f.Agent, Format: dataset.Format(f.Format)}
	req.Filters.IncludeHoldout = f.IncludeHoldout
	for _, t := range []struct {
		ptr, in string
		nextDay bool
		out     **time.Time
	}{{"/since", f.Since, false, &req.Filters.Since}, {"/until", f.Until, true, &req.Filters.Until}} {
		if t.in == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.in)
		if err != nil {
			day, derr := time.Parse("2006-01-02", t.in)
			if derr != nil {
				return req, bad(t.ptr, "%s must be a day (YYYY-MM-DD) or an RFC 3339 time", strings.TrimPrefix(t.ptr, "/"))
			}
			if t.nextDay {
				day = day.AddDate(0, 0, 1)
			}
			v = day
		}
		*t.out = &v
	}
	for _, n := range []struct {
		ptr, in string
		out     **float64
	}{{"/min_reward", f.MinReward, &req.Filters.MinReward}, {"/min_margin", f.MinMargin, &req.Filters.MinMargin}} {
		if n.in == "" {
			continue
		}
		v, err := strconv.ParseFloat(n.in, 64)
		if err != nil {
			return req, bad(n.ptr, "%s must be a number", strings.TrimPrefix(n.ptr, "/"))
		}
		*n.out = &v
	}
	if ids := strings.FieldsFunc(f.BatchIDs, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }); len(ids) > 0 {
		req.Filters.BatchIDs = ids
	}
	return req, nil
}

// createDataset is POST /ui/datasets (admins): the form goes through
// build.Create exactly as POST /api/v1/datasets does; an empty selection
// is built at once, the others wake the builder. Bad input shows the form
// again with what is wrong and stores nothing.
func (u *UI) createDataset(w http.ResponseWriter, r *http.Request, s session) error {
	if !s.Admin() {
		return errAdminOnly
	}
	f := datasetForm{Agent: r.PostFormValue("agent"), Format: r.PostFormValue("format"),
		Since: strings.TrimSpace(r.PostFormValue("since")), Until: strings.TrimSpace(r.PostFormValue("until")),
		MinReward: strings.TrimSpace(r.PostFormValue("min_reward")), MinMargin: strings.TrimSpace(r.PostFormValue("min_margin")),
		BatchIDs: r.PostFormValue("batch_ids"), IncludeHoldout: r.PostFormValue("include_holdout") == "true"}
	req, err := requestOf(f)
	var d store.Dataset
	if err == nil {
		d, err = build.Create(r.Context(), u.store, s.TenantID, req)
	}
	var ge *gyre.Error
	if errors.As(err, &ge) {
		msg := ge.Message
		if ge.Pointer != "" {
			msg += " (field " + ge.Pointer + ")"
		}
		status := http.StatusUnprocessableEntity
		if ge.Code == gyre.CodeNotFound {
			status = http.StatusNotFound
		}
		return u.showDatasets(w, r, s, status, f, msg)
	}
	if err != nil {
		return err
	}
	if u.builder != nil {
		if d.Members == 0 {
			// Nothing to read: build now; a failure leaves the job to
			// the builder.
			_ = u.builder.Build(r.Context(), d.ID)
		} else {
			u.builder.Wake()
		}
	}
	http.Redirect(w, r, Prefix+"datasets/"+d.ID, http.StatusSeeOther)
	return nil
}

// datasetView is one dataset with its manifest read.
type datasetView struct {
	D store.Dataset
	// Filters are the recorded filters; Manifest is nil until ready.
	Filters  dataset.Filters
	Manifest *dataset.Manifest
	Reasons  []reasonMeaning
	// ReasonChart draws Reasons.
	ReasonChart template.HTML
	// Pairs are dpo pairs left out, by reason.
	Pairs []reasonMeaning
	// RolloutIDs are the first manifestRollouts frozen ids; More how
	// many are not shown.
	RolloutIDs []string
	More       int
	Live       datasetLive
}

// datasetLive is the part of the page that refreshes while building.
type datasetLive struct {
	D        store.Dataset
	Building bool
	Every    string
}

// reasonMeaning is a reason code, its count and what it means.
type reasonMeaning struct {
	Reason  string
	N       int
	Meaning string
}

func (u *UI) datasetOf(r *http.Request, s session) (store.Dataset, error) {
	id, err := pathID(r)
	if err != nil {
		return store.Dataset{}, err
	}
	return u.store.GetDataset(r.Context(), s.TenantID, id)
}

// dataset is GET /ui/datasets/{id}: state (with progress while
// building), filters and the manifest, readably, with download links.
func (u *UI) dataset(w http.ResponseWriter, r *http.Request, s session) error {
	d, err := u.datasetOf(r, s)
	if err != nil {
		return err
	}
	v := datasetView{D: d, Live: liveDataset(d)}
	if len(d.Filters) > 0 {
		if err := json.Unmarshal(d.Filters, &v.Filters); err != nil {
			return fmt.Errorf("dataset %s filters: %w", d.ID, err)
		}
	}
	if d.State == store.DatasetReady && len(d.Manifest) > 0 {
		var pm pageManifest
		if err := json.Unmarshal(d.Manifest, &pm); err != nil {
			return fmt.Errorf("dataset %s manifest: %w", d.ID, err)
		}
		ids, err := firstStrings(pm.RolloutIDs, manifestRollouts)
		if err != nil {
			return fmt.Errorf("dataset %s manifest: rollout_ids: %w", d.ID, err)
		}
		m := pm.Manifest
		v.Manifest = &m
		counts := m.NotExportedByReason
		if m.Pending > 0 {
			counts = withKey(counts)
			counts[dataset.ReasonPending] = m.Pending
		}
		v.Reasons = meanings(counts)
		v.Pairs = meanings(m.PairsNotExportedByReason)
		bars := make([]chart.Bar, len(v.Reasons))
		for i, rm := range v.Reasons {
			bars[i] = chart.Bar{Label: rm.Reason, Value: float64(rm.N)}
		}
		v.ReasonChart = chart.Bars{Meta: chart.Meta{ID: "chart-not-exported", Title: "Rollouts not exported, by reason",
			Desc:  "Each reason a selected rollout was left out of the file, counted over the dataset's frozen rollouts.",
			Empty: "Every selected rollout was exported."}, Bars: bars, ValueLabel: "rollouts"}.SVG()
		v.RolloutIDs = ids
		v.More = max(m.RolloutsSelected-len(ids), 0)
	}
	u.render(w, r, http.StatusOK, "dataset", view{Title: "Dataset " + short(d.ID), Nav: "datasets", Session: s, Data: v})
	return nil
}

// pageManifest is a manifest as the dataset page reads it: its rollout
// ids (one per frozen rollout, 100,000 in a large dataset) left raw, so
// that a page linking the first few does not decode them all.
type pageManifest struct {
	dataset.Manifest
	RolloutIDs json.RawMessage `json:"rollout_ids"`
}

// firstStrings decodes at most n strings from the start of the JSON
// array raw; null is no strings.
func firstStrings(raw json.RawMessage, n int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, fmt.Errorf("not an array")
	}
	var out []string
	for len(out) < n && dec.More() {
		var v string
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func withKey(m map[string]int) map[string]int {
	out := make(map[string]int, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func liveDataset(d store.Dataset) datasetLive {
	return datasetLive{D: d, Building: d.State == store.DatasetBuilding, Every: "every 2s"}
}

// datasetLivePart is GET /ui/datasets/{id}/live: the state and progress
// fragment a building dataset's page swaps in; once the build ends it
// tells the browser to reload the whole page, which then shows the
// manifest.
func (u *UI) datasetLivePart(w http.ResponseWriter, r *http.Request, s session) error {
	d, err := u.datasetOf(r, s)
	if err != nil {
		return err
	}
	if d.State != store.DatasetBuilding {
		w.Header().Set("HX-Refresh", "true")
	}
	u.render(w, r, http.StatusOK, "dataset-live-fragment", view{Session: s, Data: liveDataset(d)})
	return nil
}

// datasetFile is GET /ui/datasets/{id}/file: the file, with the session
// (the API key never reaches the browser); a dataset not ready is a page
// that says so.
func (u *UI) datasetFile(w http.ResponseWriter, r *http.Request, s session) error {
	d, err := u.datasetOf(r, s)
	if err != nil {
		return err
	}
	if d.State != store.DatasetReady || d.BlobKey == nil || d.FileSHA256 == nil || d.FileBytes == nil {
		return &pageError{http.StatusConflict, "This dataset has no file yet: it is " + d.State + "."}
	}
	if u.blobs == nil {
		return &pageError{http.StatusServiceUnavailable, "This server has no blob store, so it cannot serve dataset files."}
	}
	rc, err := u.blobs.GetContent(r.Context(), *d.BlobKey, *d.FileSHA256)
	if err != nil {
		return fmt.Errorf("dataset %s file: %w", d.ID, err)
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/jsonl; charset=utf-8")
	h.Set("Content-Length", strconv.FormatInt(*d.FileBytes, 10))
	h.Set("Content-Disposition", `attachment; filename="`+d.ID+"."+d.Format+`.jsonl"`)
	h.Set("ETag", `"`+*d.FileSHA256+`"`)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The status is out: cut the response short so the browser sees
		// a failed download, never a complete-looking wrong file.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// datasetManifest is GET /ui/datasets/{id}/manifest: the manifest as
// JSON, a download.
func (u *UI) datasetManifest(w http.ResponseWriter, r *http.Request, s session) error {
	d, err := u.datasetOf(r, s)
	if err != nil {
		return err
	}
	if d.State != store.DatasetReady || len(d.Manifest) == 0 {
		return &pageError{http.StatusConflict, "This dataset has no manifest yet: it is " + d.State + "."}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Disposition", `attachment; filename="`+d.ID+`.manifest.json"`)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(d.Manifest, '\n'))
	return nil
}

var errAdminOnly = &pageError{http.StatusForbidden, "Only an admin key may do this: you are signed in with a reader key."}

// meanings lists counts by reason, largest first, with what each means.
func meanings(m map[string]int) []reasonMeaning {
	out := make([]reasonMeaning, 0, len(m))
	for _, rc := range sortedReasons(m) {
		out = append(out, reasonMeaning{Reason: rc.Reason, N: rc.N, Meaning: reasonMeaningOf(rc.Reason)})
	}
	return out
}

// exportReasons says what each not-exported reason code means (SPEC §9).
var exportReasons = map[string]string{
	dataset.ReasonPending:                  "not yet graded or reconciled when the dataset was created",
	dataset.ReasonHeldOut:                  "its task gates a promotion, and the selection does not include the holdout",
	dataset.ReasonNotTrainingGrade:         "decided not training grade",
	dataset.ReasonBelowMinReward:           "its reward is under min_reward (sft)",
	dataset.ReasonNoPair:                   "training grade, but in no exported pair: its group is all-pass or all-fail, or its pairs were refused (dpo)",
	dataset.ReasonNoDivergentAssistantTurn: "the pair's conversations do not first differ at an assistant message (dpo)",
	grade.NotGradeToolCallsNotReported:     "the agent reported tool_calls: null",
	grade.NotGradeToolCallsOmitted:         "the agent left tool calls out (tool_calls_omitted_count > 0)",
	grade.NotGradeLLMCallCountNotReported:  "the agent did not report llm_call_count, so reconciliation could not decide",
	grade.NotGradeOffPolicy:                "the agent's LLM call count differs from the gateway's (off policy)",
	grade.NotGradeReconciliationPending:    "reconciliation had not decided yet",
	grade.NotGradeLateSubmission:           "the output arrived after the rollout's deadline",
	grade.NotGradeLeaseLapsed:              "the output arrived after the lease had lapsed",
	grade.NotGradeNoVerdict:                "no non-optional verifier gave a non-abstaining verdict",
	grade.NotGradeNoCompletions:            "the gateway counted no completion",
	grade.NotGradeBodiesNotCaptured:        "the gateway did not capture the request and response bodies",
}

// reasonMeaningOf explains a reason code; prefixed codes explain their
// prefix.
func reasonMeaningOf(code string) string {
	if m, ok := exportReasons[code]; ok {
		return m
	}
	for _, p := range []struct{ prefix, meaning string }{
		{grade.NotGradeExcluded, "the agent excluded the rollout, with this reason"},
		{grade.NotGradeUnreconciled, "its gateway calls could not be reconciled with the agent's count, for this reason"},
		{dataset.ReasonFormatInvalid, "a row OpenAI's fine-tuning format checks (or the ATIF validator) would refuse, by this rule"},
		{grade.NotGradeState, "the server ended the rollout in this state"},
	} {
		if strings.HasPrefix(code, p.prefix) {
			return p.meaning
		}
	}
	return "see docs/datasets.md"
}

// promotionReasonMeaning explains a promotion's reason code (SPEC §10).
func promotionReasonMeaning(code string) string {
	switch {
	case code == "delta_below_min":
		return "the lower bound of the 95% interval of the mean per-task difference is under min_delta"
	case strings.HasPrefix(code, "task_regressed:"):
		return "this task went from all-pass on the baseline to all-fail on the candidate"
	case strings.HasPrefix(code, "excluded_rate_high:"):
		return "this side's excluded-plus-abandoned rate is over max_excluded_rate"
	case code == "no_graded_tasks":
		return "no task had a scored rollout on both sides, so nothing could be compared"
	case code == promotion.ReasonDeadline:
		return "deadline_s passed before every rollout ended"
	case code == promotion.ReasonCancelled:
		return "an admin cancelled the promotion; both batches were cancelled"
	case code == promotion.ReasonBaselineChanged:
		return "the agent's promoted policy changed while the promotion ran, so promoting would have overwritten a change it never measured"
	}
	return "see docs/api.md"
}
