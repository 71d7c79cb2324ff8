package harnesskit

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrUnknownRun is returned by Wait for a run the server does not hold.
var ErrUnknownRun = errors.New("harnesskit: unknown run")

// Server serves Harness API v1 around an Agent. It is an http.Handler:
// mount it at the root of a listener (the contract's paths are absolute) or
// under a prefix with http.StripPrefix. Runs execute on a pool of
// Options.MaxConcurrentRuns workers fed by a queue of Options.MaxQueuedRuns;
// finished runs are kept for Options.RetainFor, at most Options.RetainRuns
// of them. Close (or Shutdown) stops the workers and removes every run's
// workspace.
type Server struct {
	agent       Agent
	opts        Options
	caps        []byte
	tools       []json.RawMessage
	inputSchema *jsonschema.Schema
	apiKeyHash  [sha256.Size]byte
	fetchClient *http.Client
	log         *slog.Logger
	mux         *http.ServeMux

	baseCtx   context.Context
	cancelAll context.CancelFunc
	queue     chan *Run
	workers   sync.WaitGroup
	closeOnce sync.Once
	mu        sync.Mutex
	runs      map[string]*Run
	order     []*Run // every retained run, in creation order
	finished  []*Run // terminal runs, in the order they finished
	seq       uint64
	closing   bool
}

// New returns a Server for agent, or an error when opts do not validate,
// the input schema does not compile, or the check input does not match it.
// Its workers start at once; call Close when done.
func New(agent Agent, opts Options) (*Server, error) {
	if agent == nil {
		return nil, errors.New("harnesskit: agent is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("harnesskit: invalid options: %w", err)
	}
	opts = opts.withDefaults()
	raw := opts.InputSchema
	if raw == nil {
		raw = json.RawMessage(defaultInputSchema)
	}
	sch, err := compileInputSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("harnesskit: %w", err)
	}
	if opts.CheckInput != nil {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(opts.CheckInput)))
		if err != nil {
			return nil, fmt.Errorf("harnesskit: check input: %w", err)
		}
		if err := sch.Validate(doc); err != nil {
			return nil, fmt.Errorf("harnesskit: check input does not match the input schema: %s", schemaError(CodeInvalidInput, "check input", "", err).Message)
		}
	}
	if _, err := runRequestSchema(); err != nil {
		return nil, fmt.Errorf("harnesskit: compile the contract's RunRequest schema: %w", err)
	}
	tools, err := toolDefinitions(opts.ToolDefinitions)
	if err != nil {
		return nil, fmt.Errorf("harnesskit: tool definitions: %w", err)
	}
	caps, err := marshal(opts.capabilities())
	if err != nil {
		return nil, fmt.Errorf("harnesskit: encode capabilities: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		agent:       agent,
		opts:        opts,
		caps:        caps,
		tools:       tools,
		inputSchema: sch,
		fetchClient: newFetchClient(),
		log:         opts.Logger,
		baseCtx:     ctx,
		cancelAll:   cancel,
		queue:       make(chan *Run, opts.MaxQueuedRuns),
		runs:        map[string]*Run{},
	}
	if opts.APIKey != "" {
		s.apiKeyHash = sha256.Sum256([]byte(opts.APIKey))
	}
	s.mux = s.routes()
	for range opts.MaxConcurrentRuns {
		s.workers.Go(s.work)
	}
	return s, nil
}

// Capabilities returns what GET /capabilities serves.
func (s *Server) Capabilities() Capabilities {
	var c Capabilities
	_ = json.Unmarshal(s.caps, &c)
	return c
}

// routes builds the route table. Every path also has a method-less pattern
// so that a wrong method answers a JSON 405, and "/" answers a JSON 404.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(method, pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(method+" "+pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	wrongMethod := func(allow string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.writeError(w, r, errorf(CodeMethodNotAllowed, "method %s is not allowed here; use %s", r.Method, allow))
		}
	}
	handle("GET", "/capabilities", s.getCapabilities)
	mux.HandleFunc("/capabilities", wrongMethod("GET"))
	handle("POST", "/runs", s.postRun)
	handle("GET", "/runs", s.listRuns)
	mux.HandleFunc("/runs", wrongMethod("GET, POST"))
	handle("GET", "/runs/{run_id}", s.getRun)
	mux.HandleFunc("/runs/{run_id}", wrongMethod("GET"))
	handle("POST", "/runs/{run_id}/stop", s.stopRun)
	mux.HandleFunc("/runs/{run_id}/stop", wrongMethod("POST"))
	handle("GET", "/runs/{run_id}/trajectory", s.getTrajectory)
	mux.HandleFunc("/runs/{run_id}/trajectory", wrongMethod("GET"))
	handle("GET", "/runs/{run_id}/files", s.listFiles)
	mux.HandleFunc("/runs/{run_id}/files", wrongMethod("GET"))
	handle("GET", "/runs/{run_id}/files/{path...}", s.getFile)
	mux.HandleFunc("/runs/{run_id}/files/{path...}", wrongMethod("GET"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errorf(CodeNotFound, "no such endpoint"))
	})
	return mux
}

// ServeHTTP authenticates the request and routes it. A path with an empty,
// "." or ".." segment is answered 400, never redirected.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.APIKey != "" {
		got := sha256.Sum256([]byte(r.Header.Get("x-api-key")))
		if subtle.ConstantTimeCompare(got[:], s.apiKeyHash[:]) != 1 {
			s.writeError(w, r, errorf(CodeUnauthorized, "a valid x-api-key header is required"))
			return
		}
	}
	if !cleanPath(r.URL.Path) {
		s.writeError(w, r, errorf(CodeInvalidPathParam, "the path has an empty, \".\" or \"..\" segment"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath reports whether p has no empty, "." or ".." segment (a single
// trailing slash aside, which the routes treat as not found).
func cleanPath(p string) bool {
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return true
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func (s *Server) getCapabilities(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(s.caps, '\n'))
	return nil
}

// postRun validates a RunRequest, creates the run queued and answers 201
// {run_id}; a worker runs it when one is free.
func (s *Server) postRun(w http.ResponseWriter, r *http.Request) error {
	in, err := s.parseRunRequest(w, r)
	if err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("mint run id: %w", err)
	}
	run := &Run{
		id:       id.String(),
		input:    in.req.Input,
		metadata: in.req.Metadata,
		refs:     in.req.Files,
		uploads:  in.uploads,
		log:      s.log.With(slog.String("run_id", id.String())),
		now:      s.opts.Now,
		ws:       &workspace{parent: s.opts.WorkspaceDir},
		status:   StatusQueued,
		model:    s.opts.Model,
		done:     make(chan struct{}),
	}
	if in.req.Model != nil && *in.req.Model != "" && s.opts.ModelOverride {
		run.model = *in.req.Model
	}
	if q := run.Question(); q != "" {
		run.title = new(cutChars(strings.Join(strings.Fields(q), " "), 200))
	}

	model := run.model // the run is shared once queued

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return errorf(CodeUnavailable, "the harness is shutting down")
	}
	now := s.opts.Now()
	s.pruneLocked(now)
	s.seq++
	run.seq = s.seq
	run.createdAt = now
	select {
	case s.queue <- run:
	default:
		s.mu.Unlock()
		return errorf(CodeUnavailable, "the run queue is full (%d runs waiting); retry later", s.opts.MaxQueuedRuns)
	}
	s.runs[run.id] = run
	s.order = append(s.order, run)
	s.mu.Unlock()

	run.log.LogAttrs(r.Context(), slog.LevelInfo, "run queued", slog.String("model", model), slog.Int("files", len(in.req.Files)))
	writeJSON(w, http.StatusCreated, RunCreated{RunID: run.id})
	return nil
}

// run returns the retained run with the path's run_id, or a 404.
func (s *Server) run(r *http.Request) (*Run, error) {
	id := r.PathValue("run_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(s.opts.Now())
	run, ok := s.runs[id]
	if !ok {
		return nil, errorf(CodeNotFound, "no run %q", cutRunes(id, 64))
	}
	return run, nil
}

// Status returns the RunStatus of a retained run, as GET /runs/{id} serves
// it, and whether the run exists.
func (s *Server) Status(runID string) (RunStatus, bool) {
	s.mu.Lock()
	run, ok := s.runs[runID]
	s.mu.Unlock()
	if !ok {
		return RunStatus{}, false
	}
	return run.runStatus(), true
}

// Wait blocks until the run reaches a terminal status, or ctx ends, and
// returns its RunStatus. An unknown run is an error wrapping ErrUnknownRun.
func (s *Server) Wait(ctx context.Context, runID string) (RunStatus, error) {
	s.mu.Lock()
	run, ok := s.runs[runID]
	s.mu.Unlock()
	if !ok {
		return RunStatus{}, fmt.Errorf("%w: %q", ErrUnknownRun, runID)
	}
	select {
	case <-run.done:
		return run.runStatus(), nil
	case <-ctx.Done():
		return run.runStatus(), ctx.Err()
	}
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.run(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run.runStatus())
	return nil
}

// stopRun cancels a run: a queued one ends cancelled at once, a running one
// when its agent returns; a terminal one is left as it is. It answers 200
// with the run's status.
func (s *Server) stopRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.run(r)
	if err != nil {
		return err
	}
	run.mu.Lock()
	switch run.status {
	case StatusQueued:
		run.stopRequested = true
		s.finishLocked(run, StatusCancelled, Result{}, "stopped before it started")
		run.mu.Unlock()
		s.recordFinished(run)
		run.log.Info("run stopped while queued")
	case StatusRunning:
		if !run.stopRequested {
			run.stopRequested = true
			run.cancel()
			run.log.Info("run stop requested")
		}
		run.mu.Unlock()
	default:
		run.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, run.runStatus())
	return nil
}

func (s *Server) getTrajectory(w http.ResponseWriter, r *http.Request) error {
	run, err := s.run(r)
	if err != nil {
		return err
	}
	run.mu.Lock()
	status := run.status
	run.mu.Unlock()
	if !status.IsTerminal() {
		return errorf(CodeRunNotFinished, "the run is %s: its trajectory is served once it is terminal", status)
	}
	writeJSON(w, http.StatusOK, run.trajectory(&s.opts, s.tools))
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	run, err := s.run(r)
	if err != nil {
		return err
	}
	files, err := run.ws.list()
	if err != nil {
		if errors.Is(err, errWorkspaceClosed) {
			return errorf(CodeNotFound, "the run's workspace was removed")
		}
		return err
	}
	writeJSON(w, http.StatusOK, FileList{Files: files})
	return nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	run, err := s.run(r)
	if err != nil {
		return err
	}
	p := r.PathValue("path")
	if !validWorkspacePath(p) {
		return errorf(CodeInvalidPathParam, "%q is not a workspace-relative path", cutRunes(p, 256))
	}
	f, info, err := run.ws.open(p)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errWorkspaceClosed):
		return errorf(CodeNotFound, "no workspace file %q", cutRunes(p, 256))
	case err != nil:
		var pe *os.PathError
		if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
			return errorf(CodeNotFound, "no workspace file %q", cutRunes(p, 256))
		}
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.FormatInt(info.Size(), 10))
	// The whole file, always: the contract declares 200 only (no ranges).
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		if _, err := io.Copy(w, f); err != nil {
			run.log.Warn("serve workspace file", "path", p, "error", err)
		}
	}
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pruneLocked(s.opts.Now())
	entries := make([]listEntry, 0, len(s.order))
	for _, run := range s.order {
		entries = append(entries, run.listItem())
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, listRuns(entries, q))
	return nil
}

// work is one pool worker: it runs queued runs until the queue closes.
func (s *Server) work() {
	for run := range s.queue {
		s.execute(run)
	}
}

// execute runs one run's agent, if the run is still queued.
func (s *Server) execute(run *Run) {
	ctx, cancel := context.WithCancel(s.baseCtx)
	defer cancel()
	run.mu.Lock()
	if run.status != StatusQueued {
		run.mu.Unlock()
		return // stopped while queued
	}
	if ctx.Err() != nil {
		s.finishLocked(run, StatusCancelled, Result{}, "the harness shut down before the run started")
		run.mu.Unlock()
		s.recordFinished(run)
		return
	}
	run.status = StatusRunning
	run.startedAt = s.opts.Now()
	run.cancel = cancel
	run.mu.Unlock()
	run.log.Info("run started")

	res, err := s.invoke(ctx, run)

	run.mu.Lock()
	switch {
	case run.stopRequested:
		s.finishLocked(run, StatusCancelled, res, "stopped")
	case s.baseCtx.Err() != nil:
		s.finishLocked(run, StatusCancelled, res, "the harness shut down")
	case err != nil:
		s.finishLocked(run, StatusFailed, res, errorText(err))
	default:
		s.finishLocked(run, StatusCompleted, res, res.Error)
	}
	status := run.status
	msg := run.errMsg
	run.mu.Unlock()
	s.recordFinished(run)
	attrs := []slog.Attr{slog.String("status", string(status))}
	if msg != nil {
		attrs = append(attrs, slog.String("error", *msg))
	}
	run.log.LogAttrs(context.Background(), slog.LevelInfo, "run finished", attrs...)
}

// invoke delivers the run's files and calls the agent, recovering a panic.
func (s *Server) invoke(ctx context.Context, run *Run) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			run.log.Error("agent panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = Result{}, errors.New("the agent panicked")
		}
	}()
	files, err := s.fetchFiles(ctx, run)
	if err != nil {
		return Result{}, err
	}
	run.files = files
	run.uploads = nil
	res, err = s.agent.Run(ctx, run)
	if err == nil && res.Output != nil {
		b, merr := marshal(res.Output)
		if merr != nil || !isJSONObject(b) {
			return res, errors.New("the agent's output is not a JSON object")
		}
	}
	return res, err
}

// finishLocked moves run to a terminal status with res; run.mu is held.
func (s *Server) finishLocked(run *Run, status Status, res Result, msg string) {
	run.status = status
	run.finishedAt = s.opts.Now()
	if msg != "" {
		run.errMsg = &msg
	}
	if status == StatusCompleted {
		if res.Output != nil {
			b, _ := marshal(res.Output)
			run.output = b
		}
		if res.Answer != "" || run.output == nil {
			run.answer = &res.Answer
		}
	}
	run.artifacts = append(run.artifacts, res.Artifacts...)
	run.cancel = nil
	run.finishTrajectoryLocked()
}

// recordFinished queues a run that finishLocked ended for retention, in
// the order the runs finished whatever order this is called in, and then
// lets its waiters go: a run Wait has seen end is already subject to
// retention.
func (s *Server) recordFinished(run *Run) {
	s.mu.Lock()
	if _, ok := s.runs[run.id]; ok {
		at := run.finished()
		i := len(s.finished)
		for i > 0 && s.finished[i-1].finished().After(at) {
			i--
		}
		s.finished = slices.Insert(s.finished, i, run)
		s.pruneLocked(s.opts.Now())
	}
	s.mu.Unlock()
	close(run.done)
}

// finished is when the run ended.
func (run *Run) finished() time.Time {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.finishedAt
}

// pruneLocked drops finished runs beyond RetainRuns or older than
// RetainFor, oldest first, with their workspaces; s.mu is held.
func (s *Server) pruneLocked(now time.Time) {
	drop := 0
	for drop < len(s.finished) {
		old := now.Sub(s.finished[drop].finished()) > s.opts.RetainFor
		if len(s.finished)-drop <= s.opts.RetainRuns && !old {
			break
		}
		drop++
	}
	if drop == 0 {
		return
	}
	for _, run := range s.finished[:drop] {
		delete(s.runs, run.id)
		if err := run.ws.remove(); err != nil {
			s.log.Warn("remove run workspace", "run_id", run.id, "error", err)
		}
	}
	s.finished = append(s.finished[:0:0], s.finished[drop:]...)
	kept := s.order[:0]
	for _, run := range s.order {
		if _, ok := s.runs[run.id]; ok {
			kept = append(kept, run)
		}
	}
	clear(s.order[len(kept):])
	s.order = kept
}

// Shutdown stops accepting runs (POST /runs answers 503), lets the queued
// and running runs finish, and returns when the workers are done. When ctx
// ends first it cancels every run (they end cancelled), and returns
// ctx.Err() without waiting further. Workspaces are removed when the
// workers are done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.queue)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
		s.removeWorkspaces()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.cancelAll()
		return ctx.Err()
	}
}

// Close cancels every queued and running run, waits for the workers to
// return, and removes every workspace.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.queue)
	}
	s.mu.Unlock()
	s.cancelAll()
	s.workers.Wait()
	s.removeWorkspaces()
	return nil
}

func (s *Server) removeWorkspaces() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		runs := append([]*Run(nil), s.order...)
		s.mu.Unlock()
		for _, run := range runs {
			if err := run.ws.remove(); err != nil {
				s.log.Warn("remove run workspace", "run_id", run.id, "error", err)
			}
		}
	})
}

// errorText is an agent error as RunStatus.error: one line, bounded.
func errorText(err error) string {
	msg := strings.TrimSpace(err.Error())
	if msg == "" {
		msg = "the agent failed"
	}
	return cutRunes(msg, 4096)
}

// cutRunes cuts s to at most n bytes without splitting a UTF-8 sequence.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutChars cuts s to at most n characters, marking a cut with "…".
func cutChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
