package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// RegradeConcurrency is how many runs one regrade grades at once.
const RegradeConcurrency = 8

// Reasons a run is left out of a regrade.
const (
	// SkipNotGraded: the run never reached grading (an error, a timeout,
	// a harness failure, or still in flight); there is nothing to grade.
	SkipNotGraded = "not_graded"
	// SkipGradersNotRecorded: the run was recorded before records kept
	// their case's graders, and the regrade named none.
	SkipGradersNotRecorded = "graders_not_recorded"
)

// Regrader grades an experiment's stored runs again (SPEC §8): the answer,
// output, artifacts and trajectory as they were recorded — the harness is
// never called — with the graders frozen on each run or the ones given.
// Each run's new verdict set becomes current and earlier ones are kept;
// the experiment's summary is recomputed from the latest sets.
type Regrader struct {
	Store store.Store
	// Blobs holds the runs' trajectories and workspace files; nil grades
	// every run as if it had no valid trajectory and no fetched files.
	Blobs  *blobstore.Store
	Tenant string
	// Env is what graders may use: the same Env as the grading it
	// replaces (the CLI's, or the server's rollout grader's), with the
	// tenant as its Subject; each run becomes the subject in turn.
	Env grade.Env
}

// RegradeResult is what a regrade did.
type RegradeResult struct {
	// Report is the experiment's summary recomputed from the latest sets.
	Report Report `json:"summary"`
	// Regraded counts the runs graded again; Skipped the others by reason.
	Regraded int            `json:"regraded"`
	Skipped  map[string]int `json:"skipped"`
}

// Regrade regrades experiment id with graders, or with each run's frozen
// graders when graders is nil. ErrNotFound if the experiment is not the
// tenant's. A finished experiment's stored summary is replaced (its finish
// time kept); an unfinished one gets its summary when it finishes.
func (g *Regrader) Regrade(ctx context.Context, id string, graders *grade.Suite) (RegradeResult, error) {
	e, err := g.Store.Experiment(ctx, g.Tenant, id)
	if err != nil {
		return RegradeResult{}, err
	}
	runs, err := (&StoreRecorder{Store: g.Store, Tenant: g.Tenant}).Runs(ctx, id)
	if err != nil {
		return RegradeResult{}, err
	}
	var caps harnesskit.Capabilities
	if len(e.Capabilities) > 0 {
		if err := json.Unmarshal(e.Capabilities, &caps); err != nil {
			return RegradeResult{}, fmt.Errorf("capabilities snapshot: %w", err)
		}
	}
	provides := harnesskit.Provides{}
	if caps.Provides != nil {
		provides = *caps.Provides
	}
	var requested json.RawMessage
	if graders != nil {
		if requested, err = json.Marshal(graders); err != nil {
			return RegradeResult{}, err
		}
	}
	res := RegradeResult{Skipped: map[string]int{}}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		sem      = make(chan struct{}, RegradeConcurrency)
	)
	for _, run := range runs {
		if !regradable(run) {
			res.Skipped[SkipNotGraded]++
			continue
		}
		if graders == nil && len(run.Graders) == 0 {
			res.Skipped[SkipGradersNotRecorded]++
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := g.regradeRun(ctx, run, provides, graders, requested)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("regrade run %s/%d: %w", run.CaseID, run.Repetition, err)
			}
			if err == nil {
				res.Regraded++
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return RegradeResult{}, firstErr
	}
	if graders == nil && res.Regraded == 0 && res.Skipped[SkipGradersNotRecorded] > 0 {
		return RegradeResult{}, fmt.Errorf("%w: the runs of experiment %s were recorded without their graders: name the graders to use", ErrNoGraders, id)
	}
	runs, err = (&StoreRecorder{Store: g.Store, Tenant: g.Tenant}).Runs(ctx, id)
	if err != nil {
		return RegradeResult{}, err
	}
	res.Report = ReportOf(e, runs)
	if e.FinishedAt != nil {
		summary, err := json.Marshal(res.Report)
		if err != nil {
			return RegradeResult{}, err
		}
		model := e.Model
		if res.Report.Model != nil {
			model = *res.Report.Model
		}
		if _, err := g.Store.FinishExperiment(ctx, store.ExperimentFinish{TenantID: g.Tenant, ID: id, Model: model,
			Summary: summary, KeepFinishedAt: true}); err != nil {
			return RegradeResult{}, err
		}
	}
	return res, nil
}

// ErrNoGraders: a regrade without graders of runs that kept none.
var ErrNoGraders = errors.New("no graders")

// regradable reports whether a run was graded: classified by its verdicts,
// or an error raised by grading itself. Timed-out runs were never graded
// (SPEC §7.2) and stay as they are.
func regradable(r store.RunRecord) bool {
	if r.Status != string(harnesskit.StatusCompleted) || r.TimedOut {
		return false
	}
	switch grade.Classification(r.Classification) {
	case grade.Passed, grade.Failed, grade.Unscored:
		return true
	case grade.Errored:
		return strings.HasPrefix(r.Error, "grading: ")
	}
	return false
}

// regradeRun grades one stored run again and stores the new set.
func (g *Regrader) regradeRun(ctx context.Context, run store.RunRecord, provides harnesskit.Provides, graders *grade.Suite, requested json.RawMessage) error {
	source, suite := store.VerdictsFromRequest, graders
	if suite == nil {
		specs, err := grade.ParseSpecs(run.Graders)
		if err != nil {
			return fmt.Errorf("recorded graders: %w", err)
		}
		s, err := grade.Compile(specs)
		if err != nil {
			return fmt.Errorf("recorded graders: %w", err)
		}
		source, suite = store.VerdictsFromTask, &s
	}
	ev, err := g.storedEvidence(ctx, run)
	if err != nil {
		return err
	}
	files, err := g.storedFiles(ctx, run)
	if err != nil {
		return err
	}
	var artifacts []harnesskit.ArtifactRef
	if len(run.Artifacts) > 0 {
		if err := json.Unmarshal(run.Artifacts, &artifacts); err != nil {
			return fmt.Errorf("recorded artifacts: %w", err)
		}
	}
	item := runItem(run.Input, run.Answer, run.Output, artifacts, provides, ev, files)
	// The run is the subject, as when it was graded: a judge's calls are
	// recorded against it.
	env := g.Env
	env.Subject.Kind, env.Subject.ID = grade.SubjectRun, store.RunSubject(run.ExperimentID, run.CaseID, run.Repetition)
	set, err := suite.Grade(ctx, &item, env)
	if err != nil {
		return err
	}
	verdicts, err := json.Marshal(set.Verdicts)
	if err != nil {
		return err
	}
	versions, err := json.Marshal(set.Graders)
	if err != nil {
		return err
	}
	_, err = g.Store.SaveRunRegrade(ctx, store.RunRegrade{TenantID: g.Tenant, ExperimentID: run.ExperimentID,
		CaseID: run.CaseID, Repetition: run.Repetition, Verdicts: verdicts, GraderVersions: versions, Source: source,
		Graders: requested, Classification: string(set.Classify()), Score: set.Reward()})
	return err
}

// storedEvidence reads a run's stored trajectory back: nil when there is
// none or it is not valid ATIF, as when the run was graded.
func (g *Regrader) storedEvidence(ctx context.Context, run store.RunRecord) (*Evidence, error) {
	if run.TrajectorySHA256 == "" || g.Blobs == nil {
		return nil, nil
	}
	doc, err := g.blob(ctx, run.TrajectorySHA256, DefaultLimits().Trajectory)
	if err != nil {
		return nil, fmt.Errorf("trajectory %s: %w", run.TrajectorySHA256, err)
	}
	if _, t := checkTrajectory(doc); t != nil {
		ev := evidence(t)
		return &ev, nil
	}
	return nil, nil
}

// storedFiles reads back the workspace files a run fetched, with the text
// of those small enough to be inline, as when the run was graded.
func (g *Regrader) storedFiles(ctx context.Context, run store.RunRecord) (map[string]fetchedFile, error) {
	files := map[string]fetchedFile{}
	if len(run.Files) == 0 || g.Blobs == nil {
		return files, nil
	}
	var recs []FileRecord
	if err := json.Unmarshal(run.Files, &recs); err != nil {
		return nil, fmt.Errorf("recorded files: %w", err)
	}
	for _, f := range recs {
		if f.SHA256 == nil || f.Error != nil {
			continue
		}
		ff := fetchedFile{sha: *f.SHA256, size: f.Size}
		if f.Size <= maxInlineArtifact {
			b, err := g.blob(ctx, *f.SHA256, maxInlineArtifact)
			if err != nil {
				return nil, fmt.Errorf("workspace file %s: %w", *f.SHA256, err)
			}
			if utf8.Valid(b) {
				s := string(b)
				ff.content = &s
			}
		}
		files[f.Path] = ff
	}
	return files, nil
}

// blob reads one of the tenant's content-addressed blobs, verified, at
// most limit bytes.
func (g *Regrader) blob(ctx context.Context, sha string, limit int64) ([]byte, error) {
	key, err := blobstore.KeyFor(BlobPrefix(g.Tenant), sha)
	if err != nil {
		return nil, err
	}
	rc, err := g.Blobs.GetContent(ctx, key, sha)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}
