package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// trajectoryCheck is a run record's trajectory validity as the evaluator
// recorded it.
type trajectoryCheck struct {
	Valid         bool     `json:"valid"`
	Errors        []string `json:"errors"`
	SchemaVersion *string  `json:"schema_version"`
}

type runData struct {
	E        store.Experiment
	R        store.RunRecord
	Path     string
	Cell     gridCell
	Verdicts []verdictView
	Usage    eval.RunUsage
	Check    *trajectoryCheck
	// Trajectory is nil when the run has none (Note says why).
	Trajectory *trajectoryView
	Note       string
}

// trajectoryView is the viewer's first render: the head, why the
// document is not valid ATIF when it is not, and the first page of steps.
type trajectoryView struct {
	Head    trajectoryHead
	Invalid []string
	Size    int
	Page    stepsPage
	// Download is the link that serves the whole document; empty when
	// the page has none.
	Download string
}

// runOf reads the run record of the request's path.
func (u *UI) runOf(r *http.Request, s session) (store.Experiment, store.RunRecord, error) {
	id, err := pathID(r)
	if err != nil {
		return store.Experiment{}, store.RunRecord{}, err
	}
	caseID := r.PathValue("case")
	rep, err := strconv.Atoi(r.PathValue("rep"))
	if !suite.ValidName(caseID) || err != nil || rep < 1 || strconv.Itoa(rep) != r.PathValue("rep") {
		return store.Experiment{}, store.RunRecord{}, errPageNotFound
	}
	e, err := u.store.Experiment(r.Context(), s.TenantID, id)
	if err != nil {
		return store.Experiment{}, store.RunRecord{}, err
	}
	run, err := u.store.Run(r.Context(), s.TenantID, id, caseID, rep)
	if err != nil {
		return store.Experiment{}, store.RunRecord{}, err
	}
	return e, run, nil
}

// trajectory reads and parses a run's trajectory blob (or takes it from
// the cache: blobs are content-addressed).
func (u *UI) trajectory(r *http.Request, s session, sha string) (*parsedTrajectory, error) {
	if p := u.trajectories.get(s.TenantID + "/" + sha); p != nil {
		return p, nil
	}
	key, err := blobstore.KeyFor(eval.BlobPrefix(s.TenantID), sha)
	if err != nil {
		return nil, err
	}
	rc, err := u.blobs.GetContent(r.Context(), key, sha)
	if err != nil {
		return nil, fmt.Errorf("trajectory %s: %w", sha, err)
	}
	defer rc.Close()
	data, err := readAllLimited(rc, maxTrajectoryBytes)
	if err != nil {
		return nil, fmt.Errorf("trajectory %s: %w", sha, err)
	}
	p, err := readTrajectory(data)
	if err != nil {
		return nil, err
	}
	u.trajectories.put(s.TenantID+"/"+sha, p)
	return p, nil
}

// run is GET /ui/experiments/{id}/runs/{case}/{rep}: the run's result,
// verdicts and usage, and the ATIF trajectory viewer.
func (u *UI) run(w http.ResponseWriter, r *http.Request, s session) error {
	e, run, err := u.runOf(r, s)
	if err != nil {
		return err
	}
	d := runData{E: e, R: run, Path: runPath(e.ID, run.CaseID, run.Repetition),
		Cell: gridCell{Repetition: run.Repetition, Class: run.Classification, TimedOut: run.TimedOut}}
	if len(run.Verdicts) > 0 {
		var vs []grade.Verdict
		if err := json.Unmarshal(run.Verdicts, &vs); err != nil {
			return fmt.Errorf("verdicts of run %s: %w", d.Path, err)
		}
		for _, v := range vs {
			d.Verdicts = append(d.Verdicts, verdictView{v})
		}
	}
	if len(run.Usage) > 0 {
		_ = json.Unmarshal(run.Usage, &d.Usage)
	}
	if t := bytes.TrimSpace(run.Trajectory); len(t) > 0 && string(t) != "null" {
		var c trajectoryCheck
		if json.Unmarshal(run.Trajectory, &c) == nil {
			d.Check = &c
		}
	}
	switch {
	case run.TrajectorySHA256 == "":
		d.Note = "The harness provided no trajectory for this run."
	case u.blobs == nil:
		d.Note = "This server has no blob store configured, so the trajectory cannot be shown."
	default:
		p, err := u.trajectory(r, s, run.TrajectorySHA256)
		if err != nil {
			u.log.LogAttrs(r.Context(), slog.LevelError, "ui trajectory unreadable", slog.String("experiment_id", e.ID), slog.Any("error", err))
			d.Note = "The stored trajectory could not be read as ATIF; download it to look at it."
			break
		}
		page := pageOfSteps(p.T, 0)
		if page.Next > 0 {
			page.MoreURL = d.Path + "/steps?from=" + strconv.Itoa(page.Next)
		}
		d.Trajectory = &trajectoryView{Head: headOf(p.T), Invalid: p.Invalid, Size: p.Size, Page: page, Download: d.Path + "/trajectory"}
	}
	u.render(w, r, http.StatusOK, "run", view{Title: "Run " + run.CaseID + " #" + strconv.Itoa(run.Repetition), Nav: "experiments", Session: s, Data: d})
	return nil
}

// runSteps is GET /ui/experiments/{id}/runs/{case}/{rep}/steps?from=N:
// the next page of the trajectory's steps, an htmx fragment that ends
// with the block that loads the page after it.
func (u *UI) runSteps(w http.ResponseWriter, r *http.Request, s session) error {
	e, run, err := u.runOf(r, s)
	if err != nil {
		return err
	}
	if run.TrajectorySHA256 == "" || u.blobs == nil {
		return errPageNotFound
	}
	from, err := strconv.Atoi(r.URL.Query().Get("from"))
	if err != nil || from < 0 {
		return badRequest("from must be the index of a step, not %q.", r.URL.Query().Get("from"))
	}
	p, err := u.trajectory(r, s, run.TrajectorySHA256)
	if err != nil {
		return err
	}
	if from >= len(p.T.Steps) {
		return badRequest("The trajectory has %d steps; there is no step at index %d.", len(p.T.Steps), from)
	}
	page := pageOfSteps(p.T, from)
	if page.Next > 0 {
		page.MoreURL = runPath(e.ID, run.CaseID, run.Repetition) + "/steps?from=" + strconv.Itoa(page.Next)
	}
	u.render(w, r, http.StatusOK, "steps-fragment", view{Session: s, Data: page})
	return nil
}

// runTrajectory is GET /ui/experiments/{id}/runs/{case}/{rep}/trajectory:
// the stored trajectory document, as a download.
func (u *UI) runTrajectory(w http.ResponseWriter, r *http.Request, s session) error {
	e, run, err := u.runOf(r, s)
	if err != nil {
		return err
	}
	if run.TrajectorySHA256 == "" || u.blobs == nil {
		return errPageNotFound
	}
	key, err := blobstore.KeyFor(eval.BlobPrefix(s.TenantID), run.TrajectorySHA256)
	if err != nil {
		return err
	}
	rc, err := u.blobs.GetContent(r.Context(), key, run.TrajectorySHA256)
	if err != nil {
		return fmt.Errorf("trajectory of %s: %w", e.ID, err)
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="trajectory-%s-%s-%d.json"`, short(e.ID)[len("…"):], run.CaseID, run.Repetition))
	if _, err := io.Copy(w, rc); err != nil {
		// The status is sent: the error can only be logged.
		u.log.LogAttrs(r.Context(), slog.LevelError, "ui trajectory download", slog.String("experiment_id", e.ID), slog.Any("error", err))
	}
	return nil
}
