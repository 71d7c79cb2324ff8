package harnesscheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/eval"
)

// defaultCheckInput is the run input sent to a harness that declares
// neither input_schema nor check_input: it passes the default question
// schema.
const defaultCheckInput = `{"question":"This is gyre harness check. Please answer with a short greeting."}`

// maxRunIDLen bounds a run id the checks accept.
const maxRunIDLen = 1024

// experimentID is the metadata.experiment_id of every run the checks
// create, so the harness can tell them apart from real traffic.
const experimentID = "gyre-harness-check"

// checkInput checks check_input against input_schema (or the default
// question schema) and picks the run checks' input.
func (k *checker) checkInput() {
	schema, err := eval.CompileInputSchema(k.caps.InputSchema)
	if err != nil {
		k.set(CheckInput, Fail, "%v", err)
		k.noInput = "the input_schema does not compile"
		return
	}
	what := "the default question schema (no input_schema declared)"
	if schema.Declared {
		what = "the declared input_schema"
	}
	if t := bytes.TrimSpace(k.caps.CheckInput); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		if schema.Declared {
			k.set(CheckInput, Skip, "not declared: the harness declares an input_schema but no check_input, so gyre has no input it knows the agent accepts")
			k.noInput = "input_schema is declared without check_input"
			return
		}
		k.set(CheckInput, Skip, "not declared: the checks send %s, which passes the default question schema", defaultCheckInput)
		k.input = json.RawMessage(defaultCheckInput)
		return
	}
	if err := schema.Check(k.caps.CheckInput); err != nil {
		k.set(CheckInput, Fail, "check_input does not pass %s: %v", what, err)
		k.noInput = "check_input does not pass the input schema"
		return
	}
	k.set(CheckInput, Pass, "passes %s", what)
	k.input = k.caps.CheckInput
}

// runRequest is the JSON body of a run the checks create for purpose.
func (k *checker) runRequest(purpose string, files []harnesskit.FileRef) ([]byte, error) {
	rr := harnesskit.RunRequest{
		Input: k.input,
		Metadata: &harnesskit.RunMetadata{
			ExperimentID: new(experimentID),
			CaseID:       new(experimentID + "/" + purpose),
			Repetition:   new(1),
		},
		Files: files,
	}
	return json.Marshal(rr)
}

// create starts a run with POST /runs. It returns the run and a warning
// when the harness answered 200 or 202 instead of 201.
func (k *checker) create(ctx context.Context, purpose string, body []byte, contentType string) (*createdRun, string, error) {
	a, err := k.c.do(ctx, request{op: opCreateRun, path: "/runs", body: bytes.NewReader(body), ctype: contentType, limit: MaxStatusBytes})
	if err != nil {
		return nil, "", err
	}
	warning, err := k.c.expect(k.ct, opCreateRun, a, http.StatusOK, http.StatusAccepted)
	if err != nil {
		return nil, "", err
	}
	var created harnesskit.RunCreated
	if err := json.Unmarshal(a.body, &created); err != nil {
		return nil, "", fmt.Errorf("POST /runs answer is not a RunCreated: %w", err)
	}
	id := created.RunID
	if id == "" || id == "." || id == ".." || len(id) > maxRunIDLen {
		return nil, "", fmt.Errorf("POST /runs returned run_id %q, which cannot name a run in /runs/{run_id}", oneLine(id, 64))
	}
	r := &createdRun{id: id, purpose: purpose}
	k.created = append(k.created, r)
	k.log.Debug("run created", slog.String("run_id", id), slog.String("purpose", purpose))
	return r, warning, nil
}

// status fetches and validates GET /runs/{id} once.
func (k *checker) status(ctx context.Context, runID string) (harnesskit.RunStatus, error) {
	a, err := k.c.do(ctx, request{op: opRunStatus, path: runPath(runID), limit: MaxStatusBytes})
	if err != nil {
		return harnesskit.RunStatus{}, err
	}
	if _, err := k.c.expect(k.ct, opRunStatus, a); err != nil {
		return harnesskit.RunStatus{}, err
	}
	var st harnesskit.RunStatus
	if err := json.Unmarshal(a.body, &st); err != nil {
		return harnesskit.RunStatus{}, fmt.Errorf("GET /runs/{run_id} answer is not a RunStatus: %w", err)
	}
	if strings.TrimSpace(st.Model) == "" {
		return st, errors.New("RunStatus.model is empty: the contract requires the model the run executes on")
	}
	if bytes.Equal(bytes.TrimSpace(st.Output), []byte("null")) {
		st.Output = nil
	}
	if st.Status == harnesskit.StatusCompleted && st.Answer == nil && len(st.Output) == 0 {
		return st, errors.New("a completed RunStatus carries neither answer nor output")
	}
	return st, nil
}

// wait polls a run with backoff until it is terminal or RunTimeout passes.
func (k *checker) wait(ctx context.Context, r *createdRun) (harnesskit.RunStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.RunTimeout)
	defer cancel()
	interval := k.cfg.PollInterval
	last := harnesskit.Status("")
	for {
		st, err := k.status(ctx, r.id)
		if err != nil {
			if ctx.Err() != nil && last != "" {
				return st, fmt.Errorf("run %s was still %s after %s", r.id, last, k.cfg.RunTimeout)
			}
			return st, fmt.Errorf("run %s: %w", r.id, err)
		}
		if st.IsTerminal() {
			r.final = &st
			return st, nil
		}
		last = st.Status
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, fmt.Errorf("run %s was still %s after %s", r.id, last, k.cfg.RunTimeout)
		case <-t.C:
		}
		interval = min(interval*2, maxPollInterval)
	}
}

// describeEnd says how a terminal run ended.
func describeEnd(st harnesskit.RunStatus) string {
	s := fmt.Sprintf("%s on model %q", st.Status, oneLine(st.Model, 80))
	if st.Error != nil && *st.Error != "" {
		s += fmt.Sprintf(" (error: %s)", oneLine(*st.Error, 160))
	}
	return s
}

// checkRun runs check_input end to end: create, poll, terminal status
// with a model.
func (k *checker) checkRun(ctx context.Context) {
	if k.input == nil {
		if k.noInput == "input_schema is declared without check_input" {
			k.set(CheckRun, Warn, "skipped: the harness declares an input_schema without a check_input, so gyre cannot build a run input; declare check_input")
		} else {
			k.set(CheckRun, Skip, "no run input: %s", k.noInput)
		}
		return
	}
	body, err := k.runRequest("run", nil)
	if err != nil {
		k.set(CheckRun, Fail, "encode the run request: %v", err)
		return
	}
	start := k.cfg.Clock.Now()
	r, warning, err := k.create(ctx, "run", body, "application/json")
	if err != nil {
		k.set(CheckRun, Fail, "%v", err)
		return
	}
	k.main = r
	st, err := k.wait(ctx, r)
	if err != nil {
		k.set(CheckRun, Fail, "%v", err)
		return
	}
	took := k.cfg.Clock.Now().Sub(start).Round(time.Millisecond)
	switch st.Status {
	case harnesskit.StatusCompleted:
	case harnesskit.StatusCancelled:
		k.set(CheckRun, Fail, "run %s ended cancelled, yet nobody stopped it", r.id)
		return
	default:
		k.set(CheckRun, Fail, "run %s of check_input ended %s", r.id, describeEnd(st))
		return
	}
	got := []string{}
	if st.Answer != nil {
		got = append(got, fmt.Sprintf("an answer of %d bytes", len(*st.Answer)))
	}
	if len(st.Output) > 0 {
		got = append(got, "an output")
	}
	detail := fmt.Sprintf("run %s %s in %s with %s", r.id, describeEnd(st), took, strings.Join(got, " and "))
	if warning != "" {
		k.set(CheckRun, Warn, "%s; %s", warning, detail)
		return
	}
	k.set(CheckRun, Pass, "%s", detail)
}

// checkStop starts a run, stops it at once and expects it cancelled.
func (k *checker) checkStop(ctx context.Context) {
	if !k.accepts().Stop {
		k.set(CheckStop, Skip, "accepts.stop is false")
		return
	}
	if k.input == nil {
		k.set(CheckStop, Skip, "no run input: %s", k.noInput)
		return
	}
	if k.main == nil {
		k.set(CheckStop, Skip, "no run could be created (see the run check)")
		return
	}
	body, err := k.runRequest("stop", nil)
	if err != nil {
		k.set(CheckStop, Fail, "encode the run request: %v", err)
		return
	}
	r, _, err := k.create(ctx, "stop", body, "application/json")
	if err != nil {
		k.set(CheckStop, Fail, "could not start a run to stop: %v", err)
		return
	}
	a, err := k.c.do(ctx, request{op: opStop, path: runPath(r.id) + "/stop", limit: MaxStatusBytes})
	if err != nil {
		k.set(CheckStop, Fail, "%v", err)
		return
	}
	warning, err := k.c.expect(k.ct, opStop, a, http.StatusAccepted, http.StatusNoContent)
	if err != nil {
		k.set(CheckStop, Fail, "%v", err)
		return
	}
	st, err := k.wait(ctx, r)
	if err != nil {
		k.set(CheckStop, Fail, "after POST /runs/{run_id}/stop: %v", err)
		return
	}
	switch {
	case st.Status != harnesskit.StatusCancelled:
		k.set(CheckStop, Warn, "run %s ended %s before the stop took effect, so cancellation was not observed (the stop was acknowledged)", r.id, st.Status)
	case warning != "":
		k.set(CheckStop, Warn, "%s; run %s went cancelled", warning, r.id)
	default:
		k.set(CheckStop, Pass, "run %s went cancelled after POST /runs/{run_id}/stop", r.id)
	}
}
