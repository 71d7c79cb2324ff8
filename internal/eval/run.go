package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// Attempt outcomes, as recorded in a run's attempts.
const (
	outcomeInFlight    = "in_flight"
	outcomeCompleted   = "completed"
	outcomeFailed      = "failed"
	outcomeCancelled   = "cancelled"
	outcomeTimedOut    = "timed_out"
	outcomeError       = "error"
	outcomeInterrupted = "interrupted"
)

// Attempt is one try of a (case, repetition): one POST /runs and what
// became of it. Every attempt is recorded (SPEC §7.2).
type Attempt struct {
	Attempt       int        `json:"attempt"`
	RunID         string     `json:"run_id,omitempty"`
	StartedAt     time.Time  `json:"started_at"`
	EndedAt       *time.Time `json:"ended_at"`
	Status        string     `json:"status,omitempty"`
	Outcome       string     `json:"outcome"`
	Error         string     `json:"error,omitempty"`
	StopRequested bool       `json:"stop_requested,omitempty"`
}

// FileRecord is one workspace file as a run record keeps it. The path is
// the harness's, kept as data only: files are stored by digest, never
// under a harness-chosen name.
type FileRecord struct {
	Path        string  `json:"path"`
	Size        int64   `json:"size"`
	SHA256      *string `json:"sha256"`
	ContentType *string `json:"content_type"`
	Error       *string `json:"error"`
}

// maxInlineArtifact is the largest workspace file whose text a graded
// item carries inline (artifact content graders read it).
const maxInlineArtifact = 1 << 20

// fetchedFile is a workspace file that was fetched.
type fetchedFile struct {
	sha     string
	size    int64
	content *string
}

// outcome is what became of one attempt.
type outcome struct {
	runID      string
	status     *harnesskit.RunStatus
	terminal   bool
	timedOut   bool
	interrupt  bool
	stopped    bool      // a stop was acknowledged
	stopAt     time.Time // when gyre asked for a stop (zero: never)
	err        error
	retryable  bool
	created    time.Time
	terminalAt time.Time
}

// runPair runs one (case, repetition) to its end: attempts with retries,
// then trajectory, workspace and grading, and records it. Only a failure
// to record is returned as an error.
func (r *Runner) runPair(ctx context.Context, x *experiment, p pair) (store.RunRecord, error) {
	rec := store.RunRecord{ExperimentID: x.id, CaseID: p.c.ID, Repetition: p.rep, Input: p.c.Input}
	// The case's graders are frozen on the record, as a task's are, so a
	// regrade needs neither the suite file nor the harness (SPEC §8).
	graders, err := json.Marshal(p.graders)
	if err != nil {
		return rec, fmt.Errorf("freeze graders of case %s: %w", p.c.ID, err)
	}
	rec.Graders = graders
	var logs []Attempt
	resumeRunID := ""
	if p.prev != nil {
		rec.StartedAt = p.prev.StartedAt
		if len(p.prev.Attempts) > 0 {
			_ = json.Unmarshal(p.prev.Attempts, &logs)
		}
		// A run still in flight is polled again instead of recreated,
		// unless gyre itself stopped it when it was interrupted.
		if p.prev.Classification == "" && p.prev.RunID != "" && (len(logs) == 0 || !logs[len(logs)-1].StopRequested) {
			resumeRunID = p.prev.RunID
		}
	}
	retries := 0
	var (
		o       outcome
		pending = &pendingCommit{}
	)
	for {
		var err error
		if resumeRunID != "" {
			o, err = r.repoll(ctx, x, p, &rec, &logs, resumeRunID)
			resumeRunID = ""
		} else {
			o, err = r.attempt(ctx, x, p, &rec, &logs, pending)
		}
		if err != nil {
			return rec, err
		}
		if o.interrupt || o.err == nil || !o.retryable || retries >= r.cfg.Retries {
			break
		}
		retries++
		r.log.Warn("run errored; retrying", slog.String("experiment_id", x.id), slog.String("case_id", p.c.ID),
			slog.Int("repetition", p.rep), slog.Int("retry", retries), slog.String("error", o.err.Error()))
		// A retry is a new run; the old one is stopped first and keeps
		// the slot until it ends.
		if o.runID != "" && !o.terminal {
			r.abandon(ctx, x, &o)
			logs[len(logs)-1].StopRequested = !o.stopAt.IsZero()
		}
		if !r.wait(x, r.cfg.RetryBackoff<<(retries-1)) {
			o = outcome{interrupt: true}
			break
		}
	}
	if err := pending.wait(); err != nil {
		return rec, err
	}
	return r.finish(ctx, x, p, rec, logs, o)
}

// pendingCommit is a record write in flight. The write of a run id runs
// while the run is polled; the next write of the pair waits for it, so
// records reach the store in order.
type pendingCommit struct{ done chan error }

// wait waits for the write in flight, if any, and returns its error.
func (c *pendingCommit) wait() error {
	if c.done == nil {
		return nil
	}
	err := <-c.done
	c.done = nil
	return err
}

// commit writes the record with its attempts.
func (r *Runner) commit(ctx context.Context, rec *store.RunRecord, logs []Attempt) error {
	b, err := json.Marshal(logs)
	if err != nil {
		return err
	}
	rec.Attempts = b
	if err := r.rec.PutRun(ctx, *rec); err != nil {
		return fmt.Errorf("record run %s/%d: %w", rec.CaseID, rec.Repetition, err)
	}
	return nil
}

// attempt creates a run and polls it to its end.
func (r *Runner) attempt(ctx context.Context, x *experiment, p pair, rec *store.RunRecord, logs *[]Attempt, pending *pendingCommit) (outcome, error) {
	now := r.clock.Now()
	if rec.StartedAt == nil {
		rec.StartedAt = &now
	}
	*logs = append(*logs, Attempt{Attempt: len(*logs) + 1, StartedAt: now, Outcome: outcomeInFlight})
	lg := &(*logs)[len(*logs)-1]
	req, err := r.request(x, p)
	if err != nil {
		return r.ended(lg, outcome{err: err}), nil
	}
	var id string
	for {
		if x.interrupt.Err() != nil {
			return r.ended(lg, outcome{interrupt: true}), nil
		}
		id, err = r.client.CreateRun(ctx, req)
		var ce *CallError
		if errors.As(err, &ce) && ce.Kind == KindBackpressure {
			x.lim.backpressure()
			if !r.wait(x, ce.RetryAfter) {
				return r.ended(lg, outcome{interrupt: true}), nil
			}
			continue
		}
		if err != nil {
			// Other 4xx on POST /runs are not retried (SPEC §7.2).
			retry := ce == nil || ce.Retryable()
			return r.ended(lg, outcome{err: err, retryable: retry}), nil
		}
		x.lim.success()
		break
	}
	created := r.clock.Now()
	lg.RunID = id
	rec.RunID, rec.Status, rec.Classification = id, "", ""
	// The run id is committed right after POST /runs answers, so an
	// interrupted experiment can find the run again. The write goes on
	// while the run is polled; the pair's next write waits for it.
	if err := pending.wait(); err != nil {
		return outcome{}, err
	}
	snap, snapLogs := *rec, slices.Clone(*logs)
	pending.done = make(chan error, 1)
	go func(done chan<- error) { done <- r.commit(ctx, &snap, snapLogs) }(pending.done)
	o := r.poll(ctx, x, p, id, created, rec)
	return r.ended(lg, o), nil
}

// repoll resumes polling a run recorded in flight.
func (r *Runner) repoll(ctx context.Context, x *experiment, p pair, rec *store.RunRecord, logs *[]Attempt, runID string) (outcome, error) {
	rec.RunID = runID
	if len(*logs) == 0 || (*logs)[len(*logs)-1].RunID != runID {
		*logs = append(*logs, Attempt{Attempt: len(*logs) + 1, RunID: runID, StartedAt: r.clock.Now()})
	}
	lg := &(*logs)[len(*logs)-1]
	lg.Outcome, lg.EndedAt, lg.Error = outcomeInFlight, nil, ""
	o := r.poll(ctx, x, p, runID, r.clock.Now(), rec)
	return r.ended(lg, o), nil
}

// ended completes an attempt's log entry from its outcome.
func (r *Runner) ended(lg *Attempt, o outcome) outcome {
	now := r.clock.Now()
	lg.EndedAt = &now
	lg.StopRequested = lg.StopRequested || !o.stopAt.IsZero()
	if o.status != nil {
		lg.Status = string(o.status.Status)
	}
	switch {
	case o.interrupt:
		lg.Outcome = outcomeInterrupted
	case o.timedOut:
		lg.Outcome = outcomeTimedOut
	case o.err != nil:
		lg.Outcome = outcomeError
		lg.Error = o.err.Error()
	case o.terminal:
		switch o.status.Status {
		case harnesskit.StatusCompleted:
			lg.Outcome = outcomeCompleted
		case harnesskit.StatusFailed:
			lg.Outcome = outcomeFailed
			lg.Error = deref(o.status.Error)
		default:
			lg.Outcome = outcomeCancelled
		}
	}
	return o
}

// request builds the POST /runs of a pair (SPEC §7.2): the input
// verbatim, the model only with accepts.model_override, metadata, and
// the fixtures as URLs (file_urls, preferred) or multipart parts (files).
func (r *Runner) request(x *experiment, p pair) (CreateRequest, error) {
	id, caseID, rep := x.id, p.c.ID, p.rep
	req := CreateRequest{Input: p.c.Input, Metadata: harnesskit.RunMetadata{ExperimentID: &id, CaseID: &caseID, Repetition: &rep}}
	if r.cfg.Model != "" && x.accepts.ModelOverride {
		m := r.cfg.Model
		req.Model = &m
	}
	if len(p.c.Files) == 0 {
		return req, nil
	}
	req.Multipart = !x.accepts.FileURLs
	for _, f := range p.c.Files {
		fx := Fixture{Name: f.Name, Context: f.Context}
		if req.Multipart {
			file := f
			fx.Open = func(ctx context.Context) (io.ReadCloser, error) { return r.fixtures.Open(ctx, file) }
		} else {
			u, err := r.fixtures.URL(f, p.queue+p.timeout+time.Hour)
			if err != nil {
				return req, fmt.Errorf("fixture %s: %w", f.Name, err)
			}
			fx.URL = u
		}
		req.Files = append(req.Files, fx)
	}
	return req, nil
}

// wait sleeps d unless the experiment is interrupted first; it reports
// whether it slept the whole time.
func (r *Runner) wait(x *experiment, d time.Duration) bool {
	if x.interrupt.Err() != nil {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.interrupt.Done():
		return false
	}
}

// nextDelay is the polling backoff: PollInitial doubling up to PollMax.
func (r *Runner) nextDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return r.cfg.PollInitial
	}
	return min(2*d, r.cfg.PollMax)
}

// poll polls a run until it is terminal, times out, errors or the
// experiment is interrupted. The timeout clock starts at the first poll
// that reports running; before that the queue timeout applies.
func (r *Runner) poll(ctx context.Context, x *experiment, p pair, runID string, created time.Time, rec *store.RunRecord) outcome {
	o := outcome{runID: runID, created: created}
	var (
		delay, next  time.Duration
		failures     int
		runningSince time.Time
	)
	for {
		if !r.wait(x, next) {
			return r.interrupted(ctx, x, o)
		}
		st, err := r.client.RunStatus(ctx, runID)
		now := r.clock.Now()
		var ce *CallError
		switch {
		case err == nil:
			failures = 0
			o.status = &st
			rec.Status, rec.Model = string(st.Status), st.Model
			if st.IsTerminal() {
				o.terminal, o.terminalAt = true, now
				return o
			}
			if st.Status == harnesskit.StatusRunning && runningSince.IsZero() {
				runningSince = now
			}
			delay = r.nextDelay(delay)
			next = delay
		case errors.As(err, &ce) && ce.Kind == KindBackpressure:
			x.lim.backpressure()
			next = ce.RetryAfter
		default:
			// An invalid RunStatus, a 5xx or a transport error is polled
			// again up to InvalidPolls times (SPEC §7.2).
			failures++
			if failures > r.cfg.InvalidPolls {
				o.err, o.retryable = fmt.Errorf("%w (after %d polls)", err, failures), true
				return o
			}
			delay = r.nextDelay(delay)
			next = delay
		}
		var deadline time.Time
		if runningSince.IsZero() {
			deadline = created.Add(p.queue)
			if !now.Before(deadline) {
				o.err = fmt.Errorf("the run stayed queued longer than the queue timeout %s", p.queue)
				r.stop(ctx, x, &o)
				return o
			}
		} else {
			deadline = runningSince.Add(p.timeout)
			if !now.Before(deadline) {
				return r.timedOut(ctx, x, o)
			}
		}
		next = min(next, deadline.Sub(now))
	}
}

// stop asks the harness to stop the run, when it accepts stop, and notes
// the time.
func (r *Runner) stop(ctx context.Context, x *experiment, o *outcome) {
	o.stopAt = r.clock.Now()
	if !x.accepts.Stop || o.runID == "" {
		return
	}
	if err := r.client.Stop(ctx, o.runID); err != nil {
		r.log.Warn("stop failed", slog.String("experiment_id", x.id), slog.String("run_id", o.runID), slog.String("error", err.Error()))
		return
	}
	o.stopped = true
}

// timedOut handles a run past its timeout (SPEC §7.2): stop it when the
// harness accepts stop and wait up to StopWait for a terminal status.
func (r *Runner) timedOut(ctx context.Context, x *experiment, o outcome) outcome {
	o.timedOut = true
	r.stop(ctx, x, &o)
	r.waitTerminal(ctx, x, &o, o.stopAt.Add(r.cfg.StopWait))
	return o
}

// interrupted stops an in-flight run when the user interrupts.
func (r *Runner) interrupted(ctx context.Context, x *experiment, o outcome) outcome {
	o.interrupt = true
	r.stop(ctx, x, &o)
	if !o.stopped {
		o.stopAt = time.Time{} // not stopped: a resume polls it again
	}
	return o
}

// abandon stops a run that is being retried and holds its slot until it
// ends or SlotHold has passed since the stop.
func (r *Runner) abandon(ctx context.Context, x *experiment, o *outcome) {
	r.stop(ctx, x, o)
	r.waitTerminal(ctx, x, o, o.stopAt.Add(r.cfg.SlotHold))
}

// waitTerminal polls until the run is terminal or until, ignoring poll
// failures; an interrupt ends the wait early.
func (r *Runner) waitTerminal(ctx context.Context, x *experiment, o *outcome, until time.Time) {
	var delay time.Duration
	for !o.terminal {
		left := until.Sub(r.clock.Now())
		if left <= 0 {
			return
		}
		delay = r.nextDelay(delay)
		if !r.wait(x, min(delay, left)) {
			return
		}
		st, err := r.client.RunStatus(ctx, o.runID)
		if err == nil && st.IsTerminal() {
			o.status, o.terminal, o.terminalAt = &st, true, r.clock.Now()
		}
	}
}

// finish fetches what a finished attempt left (trajectory, workspace),
// classifies and grades it, records it, and holds the slot of a stopped
// run until it ends (at most SlotHold after the stop).
func (r *Runner) finish(ctx context.Context, x *experiment, p pair, rec store.RunRecord, logs []Attempt, o outcome) (store.RunRecord, error) {
	rec.RunID = o.runID
	if o.runID == "" && len(logs) > 0 {
		rec.RunID = logs[len(logs)-1].RunID
	}
	if o.status != nil {
		st := o.status
		rec.Status, rec.Model, rec.Answer = string(st.Status), st.Model, st.Answer
		rec.Output = st.Output
		if len(st.Artifacts) > 0 {
			rec.Artifacts, _ = json.Marshal(st.Artifacts)
		}
	}
	if o.interrupt {
		rec.Classification = ""
		return rec, r.commit(ctx, &rec, logs)
	}
	now := r.clock.Now()
	rec.FinishedAt = &now
	if !o.terminalAt.IsZero() && !o.created.IsZero() {
		ms := float64(o.terminalAt.Sub(o.created).Microseconds()) / 1000
		rec.LatencyMS = &ms
	}

	// The trajectory is fetched once, after the terminal status (or the
	// timeout), and the workspace after a terminal status.
	var (
		traj  *atif.Trajectory
		files map[string]fetchedFile
	)
	if o.runID != "" && (o.terminal || o.timedOut) && x.provides.Trajectory {
		info, t, sum, size, err := r.fetchTrajectory(ctx, x, o.runID)
		if err != nil {
			return rec, err
		}
		rec.Trajectory, _ = json.Marshal(info)
		rec.TrajectorySHA256 = sum
		if sum != "" {
			rec.Blobs = append(rec.Blobs, store.BlobRef{SHA256: sum, Size: size})
		}
		traj = t
	}
	if o.runID != "" && o.terminal && x.provides.Workspace {
		recs, fetched, err := r.fetchWorkspace(ctx, x, o.runID)
		if err != nil {
			return rec, err
		}
		rec.Files, _ = json.Marshal(recs)
		files = fetched
		for _, f := range fetched {
			rec.Blobs = append(rec.Blobs, store.BlobRef{SHA256: f.sha, Size: f.size})
		}
	}
	var ev *Evidence
	if traj != nil {
		e := evidence(traj)
		ev = &e
		if e.Usage != nil {
			rec.Usage, _ = json.Marshal(RunUsage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, CostUSD: e.Usage.CostUSD})
		}
	}

	failure := grade.Errored
	if r.cfg.FailedIsFailure {
		failure = grade.Failed
	}
	switch {
	case o.timedOut:
		rec.Classification, rec.TimedOut = string(grade.Failed), true
		rec.Error = fmt.Sprintf("timed out after %s", p.timeout)
		zero := 0.0
		rec.Score = &zero
	case o.err != nil:
		rec.Classification, rec.Error = string(grade.Errored), o.err.Error()
	case o.status.Status == harnesskit.StatusCompleted:
		if o.status.Error != nil {
			rec.Error = *o.status.Error // non-fatal: graded normally
		}
		set, err := r.gradeRun(ctx, x, p, o.status, ev, files)
		if err != nil {
			rec.Classification, rec.Error = string(grade.Errored), "grading: "+err.Error()
			break
		}
		rec.Verdicts, _ = json.Marshal(set.Verdicts)
		rec.GraderVersions, _ = json.Marshal(set.Graders)
		rec.Classification = string(set.Classify())
		rec.Score = set.Reward()
	case o.status.Status == harnesskit.StatusFailed:
		rec.Classification = string(failure)
		rec.Error = "the harness reported the run failed"
		if e := deref(o.status.Error); e != "" {
			rec.Error += ": " + e
		}
	default: // cancelled, and gyre did not ask
		rec.Classification = string(failure)
		rec.Error = "the harness cancelled the run"
		if e := deref(o.status.Error); e != "" {
			rec.Error += ": " + e
		}
	}
	if err := r.commit(ctx, &rec, logs); err != nil {
		return rec, err
	}
	if !o.stopAt.IsZero() && !o.terminal {
		r.waitTerminal(ctx, x, &o, o.stopAt.Add(r.cfg.SlotHold))
	}
	return rec, nil
}

// maxBackpressureWaits bounds the backpressure waits of one fetch.
const maxBackpressureWaits = 5

// backpressured runs call, and again after each backpressure answer
// (429/503 with Retry-After) once its wait is over, a few times at most:
// a fetch the harness deferred was not yet made.
func (r *Runner) backpressured(x *experiment, call func() error) error {
	for i := 0; ; i++ {
		err := call()
		var ce *CallError
		if i == maxBackpressureWaits || !errors.As(err, &ce) || ce.Kind != KindBackpressure {
			return err
		}
		x.lim.backpressure()
		if !r.wait(x, ce.RetryAfter) {
			return err
		}
	}
}

// fetchTrajectory fetches, validates and stores a run's trajectory. A
// fetch failure or an oversized document makes it invalid; only a
// failure to store it is an error.
func (r *Runner) fetchTrajectory(ctx context.Context, x *experiment, runID string) (TrajectoryInfo, *atif.Trajectory, string, int64, error) {
	var body io.ReadCloser
	err := r.backpressured(x, func() (err error) { body, err = r.client.Trajectory(ctx, runID); return err })
	if err != nil {
		var ce *CallError
		if errors.As(err, &ce) && ce.Reason == "too_large" {
			return invalidTrajectory(fmt.Sprintf("too_large: the trajectory is larger than %d bytes", r.cfg.Limits.Trajectory)), nil, "", 0, nil
		}
		return invalidTrajectory("fetch failed: " + err.Error()), nil, "", 0, nil
	}
	sp := NewSpool()
	defer sp.Close()
	_, err = io.Copy(sp, body)
	body.Close()
	switch {
	case errors.Is(err, errTooLarge):
		return invalidTrajectory(fmt.Sprintf("too_large: the trajectory is larger than %d bytes", r.cfg.Limits.Trajectory)), nil, "", 0, nil
	case err != nil:
		return invalidTrajectory("fetch failed: " + err.Error()), nil, "", 0, nil
	}
	doc, err := sp.Bytes()
	if err != nil {
		return TrajectoryInfo{}, nil, "", 0, err
	}
	info, t := checkTrajectory(doc)
	if err := r.rec.PutBlob(ctx, sp); errors.Is(err, ErrBlobTooLarge) {
		r.log.Warn("trajectory not stored", slog.String("run_id", runID), slog.String("error", err.Error()))
		r.progress.Warn(fmt.Sprintf("the trajectory of run %s (%d bytes) was not stored: %v", runID, sp.Size(), err))
		return info, t, "", 0, nil
	} else if err != nil {
		return TrajectoryInfo{}, nil, "", 0, fmt.Errorf("store trajectory of run %s: %w", runID, err)
	}
	return info, t, sp.SHA256(), sp.Size(), nil
}

// fetchWorkspace lists a run's workspace and stores each file by digest.
// Paths that are absolute or have an empty, "." or ".." segment are
// refused without a request; at most Limits.Files files are fetched, each
// at most Limits.File bytes.
func (r *Runner) fetchWorkspace(ctx context.Context, x *experiment, runID string) ([]FileRecord, map[string]fetchedFile, error) {
	recs := []FileRecord{}
	fetched := map[string]fetchedFile{}
	var list harnesskit.FileList
	err := r.backpressured(x, func() (err error) { list, err = r.client.Files(ctx, runID); return err })
	if err != nil {
		msg := "listing failed: " + err.Error()
		return append(recs, FileRecord{Error: &msg}), fetched, nil
	}
	for i, f := range list.Files {
		if i >= r.cfg.Limits.Files {
			msg := fmt.Sprintf("skipped: the listing has %d files; at most %d are fetched", len(list.Files), r.cfg.Limits.Files)
			recs = append(recs, FileRecord{Path: "", Error: &msg})
			break
		}
		fr := FileRecord{Path: f.Path, Size: f.Size, ContentType: f.ContentType}
		if _, err := WorkspacePath(f.Path); err != nil {
			msg := "rejected: " + err.Error()
			fr.Error = &msg
			recs = append(recs, fr)
			continue
		}
		if f.Size > r.cfg.Limits.File {
			msg := fmt.Sprintf("too_large: larger than %d bytes", r.cfg.Limits.File)
			fr.Error = &msg
			recs = append(recs, fr)
			continue
		}
		ff, err := r.fetchFile(ctx, x, runID, f.Path)
		switch {
		case err == nil:
			fr.SHA256 = &ff.sha
			fr.Size = ff.size
			fetched[f.Path] = ff
		case errors.Is(err, errStore):
			return nil, nil, err
		default:
			msg := err.Error()
			fr.Error = &msg
		}
		recs = append(recs, fr)
	}
	return recs, fetched, nil
}

// errStore marks a failure to store a blob, which ends the experiment.
var errStore = errors.New("store")

func (r *Runner) fetchFile(ctx context.Context, x *experiment, runID, path string) (fetchedFile, error) {
	var body io.ReadCloser
	err := r.backpressured(x, func() (err error) { body, err = r.client.File(ctx, runID, path); return err })
	if err != nil {
		var ce *CallError
		if errors.As(err, &ce) && ce.Reason == "too_large" {
			return fetchedFile{}, fmt.Errorf("too_large: larger than %d bytes", r.cfg.Limits.File)
		}
		return fetchedFile{}, fmt.Errorf("fetch failed: %w", err)
	}
	sp := NewSpool()
	defer sp.Close()
	_, err = io.Copy(sp, body)
	body.Close()
	if errors.Is(err, errTooLarge) {
		return fetchedFile{}, fmt.Errorf("too_large: larger than %d bytes", r.cfg.Limits.File)
	}
	if err != nil {
		return fetchedFile{}, fmt.Errorf("fetch failed: %w", err)
	}
	if err := r.rec.PutBlob(ctx, sp); errors.Is(err, ErrBlobTooLarge) {
		return fetchedFile{}, fmt.Errorf("not stored: %w", err)
	} else if err != nil {
		return fetchedFile{}, fmt.Errorf("%w: workspace file of run %s: %w", errStore, runID, err)
	}
	ff := fetchedFile{sha: sp.SHA256(), size: sp.Size()}
	if sp.Size() <= maxInlineArtifact {
		if b, err := sp.Bytes(); err == nil && utf8.Valid(b) {
			s := string(b)
			ff.content = &s
		}
	}
	return ff, nil
}

// gradeRun builds the graded item of a completed run (SPEC §8) and grades
// it with the case's graders.
func (r *Runner) gradeRun(ctx context.Context, x *experiment, p pair, st *harnesskit.RunStatus, ev *Evidence, files map[string]fetchedFile) (grade.VerdictSet, error) {
	item := runItem(p.c.Input, st.Answer, st.Output, st.Artifacts, x.provides, ev, files)
	// The run is the subject: a judge's calls are recorded against it.
	env := r.env
	env.Subject.Kind, env.Subject.ID = grade.SubjectRun, store.RunSubject(x.id, p.c.ID, p.rep)
	return p.graders.Grade(ctx, &item, env)
}

// runItem is the graded item of a completed run, from what the run left:
// the case input, the answer and output, the reported artifacts with the
// fetched workspace files, and the evidence of a valid trajectory. Tool
// calls come from the trajectory only when the harness provides tool calls
// and the trajectory is valid. Grading and regrading build it alike.
func runItem(input json.RawMessage, answer *string, output json.RawMessage, artifacts []harnesskit.ArtifactRef,
	provides harnesskit.Provides, ev *Evidence, files map[string]fetchedFile) grade.Item {
	valid := ev != nil
	toolCalls := provides.ToolCalls
	item := grade.Item{
		Kind: grade.KindRun, Input: input, Answer: answer, Output: output,
		TrajectoryValid: &valid, ProvidesToolCalls: &toolCalls,
	}
	if ev != nil {
		if toolCalls {
			item.ToolCalls = ev.ToolCalls
		}
		steps, calls := ev.Steps, ev.LLMCalls
		item.Steps, item.LLMCalls, item.Usage = &steps, &calls, ev.Usage
	}
	if artifacts != nil || provides.Artifacts {
		item.Artifacts = map[string]grade.Artifact{}
		for _, a := range artifacts {
			if a.Path != nil {
				if f, ok := files[*a.Path]; ok {
					size := f.size
					item.Artifacts[a.Name] = grade.Artifact{SHA256: f.sha, SizeBytes: &size, Content: f.content}
					continue
				}
			}
			// Reported but not fetched: it exists, its bytes are unknown.
			item.Artifacts[a.Name] = grade.Artifact{Skipped: "skipped:not_fetched"}
		}
	}
	return item
}
