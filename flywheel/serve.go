package flywheel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler runs one rollout for Serve. It returns the rollout's output, or
// an error for a fault of its own (reported as exclusion flywheel_crash).
//
// ctx ends when the rollout must stop; context.Cause(ctx) then says why:
// ErrRolloutDeadline (deadline_ts passed), ErrDraining (the worker is
// shutting down), ErrLeaseLost or ErrRolloutFinished (the server took the
// rollout back; whatever the handler returns is discarded). A handler
// should stop promptly, but it may take a few seconds to wind down (a
// subprocess gets SIGTERM, then SIGKILL); the output it then returns is
// still submitted, with the exclusion the cause implies.
type Handler interface {
	HandleRollout(ctx context.Context, r *Rollout) (RolloutOutput, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, r *Rollout) (RolloutOutput, error)

// HandleRollout calls f.
func (f HandlerFunc) HandleRollout(ctx context.Context, r *Rollout) (RolloutOutput, error) {
	return f(ctx, r)
}

// Reasons a rollout's context ends, read with context.Cause.
var (
	// ErrRolloutDeadline: the rollout's deadline_ts passed.
	ErrRolloutDeadline = errors.New("flywheel: rollout deadline reached")
	// ErrDraining: the worker is shutting down and the drain period ended.
	ErrDraining = errors.New("flywheel: worker stopping")
)

// Rollout is one claimed rollout as a Handler sees it.
type Rollout struct {
	// Request is the RolloutRequest as claimed. It holds secrets (APIKey,
	// LeaseToken, and the gateway token inside LLMURL): never log them.
	Request RolloutRequest
	// Deadline is deadline_ts on the local clock, corrected by the clock
	// offset estimated at claim: the only source of the rollout's timeout.
	Deadline time.Time
	// ClockOffset is the server's clock minus the local clock, as
	// estimated from the claim answer's Date header.
	ClockOffset time.Duration
	// Root is the worker's root directory (ServeConfig.Root, absolute).
	Root string
	// ArtifactsDir is the absolute, created directory for the rollout's
	// artifacts: Request.ArtifactsDir resolved under Root.
	ArtifactsDir string
	// PrivateDir is an absolute, created directory private to the rollout
	// (mode 0700), outside ArtifactsDir; Serve removes it afterwards.
	PrivateDir string
	// ClaimedAt is when the claim answer arrived (local clock).
	ClaimedAt time.Time

	mu       sync.Mutex
	fallback *string
}

// SetFallbackText sets the final_text of the minimal output Serve submits
// if the server rejects the full one (422 or 413): typically the agent's
// stdout. Without it Serve uses the output's own final_text.
func (r *Rollout) SetFallbackText(s string) {
	r.mu.Lock()
	r.fallback = &s
	r.mu.Unlock()
}

func (r *Rollout) fallbackText(def string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fallback != nil {
		return *r.fallback
	}
	return def
}

// Defaults of ServeConfig.
const (
	DefaultLease     = 60 * time.Second
	DefaultDrain     = 5 * time.Minute
	DefaultPollWait  = 10 * time.Second
	DefaultStopGrace = 30 * time.Second
	// ServerGrace is how long after deadline_ts gyre still accepts an
	// output (SPEC §4.5); Serve keeps retrying a submission until then.
	ServerGrace = 30 * time.Second
	// MinHeartbeat is the shortest heartbeat interval (SPEC §4.5).
	MinHeartbeat = time.Second
	// FallbackTextLimit caps the final_text of the minimal output Serve
	// submits after a rejection.
	FallbackTextLimit = 64 << 10
)

// ServeConfig configures Serve. Zero fields take their defaults.
type ServeConfig struct {
	// Client talks to the server. Required.
	Client *Client
	// AgentID is the agent whose rollouts are claimed. Required.
	AgentID string
	// Concurrency is how many rollouts run at once (default 1).
	Concurrency int
	// Lease is the lease length asked for at claim (default 60 s); the
	// server clamps it and the heartbeat cadence follows what it granted.
	Lease time.Duration
	// Root is the worker's directory: rollouts' artifacts directories are
	// resolved under it, and it holds the private per-rollout directories
	// and the worker-id file. Required; created if missing.
	Root string
	// Drain bounds how long running rollouts may go on after ctx is
	// cancelled (default 5 min); then they are stopped and reported
	// cancelled.
	Drain time.Duration
	// Stop, when closed during the drain, ends it at once.
	Stop <-chan struct{}
	// PollWait is the long-poll of each claim (default 10 s; negative
	// disables long-polling).
	PollWait time.Duration
	// StopGrace is how long Serve waits for a Handler to return after its
	// context ended (default 30 s). A Handler still running then is left
	// behind and the rollout is reported with the cause's exclusion.
	StopGrace time.Duration
	// WorkerID is sent with every claim; default StableWorkerID(Root).
	WorkerID string
	// WorkerVersion is sent with every claim.
	WorkerVersion string
	// Logger receives the loop's logs; nil discards them.
	Logger *slog.Logger
}

func (c ServeConfig) withDefaults() (ServeConfig, error) {
	if c.Client == nil {
		return c, errors.New("flywheel: serve needs a client")
	}
	if err := ValidateAgentID(c.AgentID); err != nil {
		return c, fmt.Errorf("flywheel: agent id: %w", err)
	}
	if c.Root == "" {
		return c, errors.New("flywheel: serve needs a root directory")
	}
	root, err := filepath.Abs(c.Root)
	if err != nil {
		return c, fmt.Errorf("flywheel: root: %w", err)
	}
	c.Root = root
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.Concurrency < 0 {
		return c, fmt.Errorf("flywheel: concurrency must be positive, not %d", c.Concurrency)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.PollWait == 0 {
		c.PollWait = DefaultPollWait
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.Lease < 0 || c.Drain < 0 || c.StopGrace < 0 {
		return c, errors.New("flywheel: lease, drain and stop grace must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Serve runs the agent side of flywheel/1 (SPEC §5) with h as the agent:
// it claims rollouts of cfg.AgentID as slots free up, runs each with h,
// heartbeats every third of the granted lease, and submits each output.
//
// It obeys the server's poll_after_ms and backs off on its own (exponential
// with jitter, Retry-After honoured) only after transport errors and
// temporary answers (429, 5xx). A lost lease stops the handler and nothing
// more is reported for that rollout. An output the server rejects (422,
// 413) is followed by one minimal valid output so the rollout is never
// silently lost.
//
// Cancelling ctx starts a graceful stop: no more claims; rollouts claimed
// but not started are released; running ones may finish until their
// deadline or cfg.Drain, then they are stopped and reported cancelled.
// Serve returns nil after a graceful stop, or the error that made it stop
// claiming (a rejected key, a forbidden agent) once running rollouts ended.
func Serve(ctx context.Context, cfg ServeConfig, h Handler) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if h == nil {
		return errors.New("flywheel: serve needs a handler")
	}
	if err := os.MkdirAll(cfg.Root, 0o750); err != nil {
		return fmt.Errorf("flywheel: create root: %w", err)
	}
	if cfg.WorkerID == "" {
		if cfg.WorkerID, err = StableWorkerID(cfg.Root); err != nil {
			return err
		}
	}
	s := &server{cfg: cfg, h: h, log: cfg.Logger, free: cfg.Concurrency,
		freed: make(chan struct{}, 1), running: map[*Rollout]context.CancelCauseFunc{}}
	s.log.LogAttrs(ctx, slog.LevelInfo, "worker started", slog.String("agent_id", cfg.AgentID),
		slog.String("worker_id", cfg.WorkerID), slog.Int("concurrency", cfg.Concurrency))
	loopErr := s.loop(ctx)
	s.drain(ctx)
	s.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "worker stopped")
	return loopErr
}

// server is one Serve call.
type server struct {
	cfg ServeConfig
	h   Handler
	log *slog.Logger

	mu      sync.Mutex
	free    int
	freed   chan struct{}
	running map[*Rollout]context.CancelCauseFunc
	// stopping is set when the drain ends: a rollout that registers after
	// it is stopped at once.
	stopping bool
	wg       sync.WaitGroup
}

// loop claims until ctx ends or a permanent error.
func (s *server) loop(ctx context.Context) error {
	bo := backoff{base: 500 * time.Millisecond, max: 30 * time.Second}
	var pollAt time.Time
	idem := ""
	for {
		if ctx.Err() != nil {
			return nil
		}
		free := s.freeSlots()
		if free == 0 {
			select {
			case <-s.freed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if !sleep(ctx, time.Until(pollAt)) {
			return nil
		}
		if idem == "" {
			idem = newID()
		}
		req := ClaimRequest{
			MaxRollouts: min(free, 64), Lease: s.cfg.Lease, WorkerID: s.cfg.WorkerID,
			WorkerVersion: s.cfg.WorkerVersion, IdempotencyKey: idem,
		}
		if s.cfg.PollWait > 0 {
			req.Wait = s.cfg.PollWait
		}
		cctx, cancel := context.WithTimeout(ctx, req.Wait+30*time.Second)
		res, err := s.cfg.Client.Claim(cctx, s.cfg.AgentID, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				// The claim may have leased rollouts before it was cut off;
				// the same idempotency key returns them, to be released.
				req.Wait = 0
				s.recoverClaim(ctx, req)
				return nil
			}
			var ve *ValidationError
			switch {
			case errors.As(err, &ve):
				s.log.LogAttrs(ctx, slog.LevelError, "claim answer breaks flywheel/1; retrying", slog.Any("error", err))
				idem = ""
			case IsTemporary(err):
				s.log.LogAttrs(ctx, slog.LevelWarn, "claim failed; retrying", slog.Any("error", err))
			default:
				s.log.LogAttrs(ctx, slog.LevelError, "claim refused; stopping", slog.Any("error", err))
				return fmt.Errorf("claim: %w", err)
			}
			pollAt = time.Now().Add(bo.next(RetryAfter(err)))
			continue
		}
		bo.reset()
		idem = ""
		pollAt = res.Received.Add(time.Duration(res.Response.PollAfterMS) * time.Millisecond)
		for _, rr := range res.Response.Rollouts {
			s.admit(ctx, res, rr)
		}
	}
}

func (s *server) freeSlots() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}

// admit starts a claimed rollout, or hands it back when it cannot start:
// the worker is stopping, or the server sent more than the free slots.
func (s *server) admit(ctx context.Context, res *ClaimResult, rr RolloutRequest) {
	s.mu.Lock()
	ok := ctx.Err() == nil && s.free > 0
	if ok {
		s.free--
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if !ok {
		s.handBack(ctx, rr)
		return
	}
	go func() {
		defer func() {
			s.mu.Lock()
			s.free++
			s.mu.Unlock()
			select {
			case s.freed <- struct{}{}:
			default:
			}
			s.wg.Done()
		}()
		s.runRollout(ctx, res, rr)
	}()
}

// recoverClaim repeats an interrupted claim without waiting, under the same
// idempotency key, and releases whatever it returns.
func (s *server) recoverClaim(ctx context.Context, req ClaimRequest) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res, err := s.cfg.Client.Claim(rctx, s.cfg.AgentID, req)
	if err != nil {
		s.log.LogAttrs(rctx, slog.LevelWarn, "could not recover an interrupted claim; its rollouts, if any, will be abandoned and retried",
			slog.Any("error", err))
		return
	}
	for _, rr := range res.Response.Rollouts {
		s.handBack(rctx, rr)
	}
}

// handBack releases a rollout that will not start; if the release fails,
// it reports exclusion capacity so that the rollout is not lost.
func (s *server) handBack(ctx context.Context, rr RolloutRequest) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	token := rr.LeaseToken.Or("")
	log := s.log.With(slog.String("rollout_id", rr.RolloutID))
	err := s.cfg.Client.Release(rctx, rr.RolloutID, token)
	if err == nil {
		log.LogAttrs(rctx, slog.LevelInfo, "released a rollout that was not started")
		return
	}
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRolloutFinished) {
		return
	}
	log.LogAttrs(rctx, slog.LevelWarn, "release failed; reporting capacity", slog.Any("error", err))
	out := RolloutOutput{FinalText: "", ToolCalls: Null[[]ToolCallRecord](),
		Exclusion: Some(Exclusion{Reason: ExclusionCapacity, Detail: Some("the worker claimed more rollouts than it could start")})}
	if _, err := s.cfg.Client.SubmitOutput(rctx, rr.RolloutID, token, out); err != nil {
		log.LogAttrs(rctx, slog.LevelError, "could not report capacity", slog.Any("error", err))
	}
}

// drain waits for running rollouts until cfg.Drain or cfg.Stop, then
// stops them and waits for them to report.
func (s *server) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	default:
	}
	bg := context.WithoutCancel(ctx)
	s.log.LogAttrs(bg, slog.LevelInfo, "draining running rollouts", slog.Duration("drain", s.cfg.Drain))
	t := time.NewTimer(s.cfg.Drain)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	case <-s.cfg.Stop:
	}
	s.mu.Lock()
	s.stopping = true
	for _, stop := range s.running {
		stop(ErrDraining)
	}
	s.mu.Unlock()
	<-done
}

// runRollout runs one rollout from claim to submission.
func (s *server) runRollout(parent context.Context, res *ClaimResult, rr RolloutRequest) {
	log := s.log.With(slog.String("rollout_id", rr.RolloutID))
	offset := res.ClockOffset()
	ro := &Rollout{
		Request:     rr,
		Deadline:    epochTime(rr.DeadlineTS).Add(-offset),
		ClockOffset: offset,
		ClaimedAt:   res.Received,
		Root:        s.cfg.Root,
	}
	// The grant is read once, at claim (SPEC §4.4): beats every third of
	// what remains of it by the server's clock.
	grant := s.cfg.Lease
	if exp, ok := rr.LeaseExpiresTS.Get(); ok {
		grant = epochTime(exp).Add(-offset).Sub(res.Received)
	}
	every := max(grant/3, MinHeartbeat)

	base := context.WithoutCancel(parent)
	life, endLife := context.WithCancelCause(base) // ends when the server takes the rollout back
	defer endLife(nil)
	stoppable, stop := context.WithCancelCause(life) // ends on drain
	defer stop(nil)
	hctx, cancelDeadline := context.WithDeadlineCause(stoppable, ro.Deadline, ErrRolloutDeadline)
	defer cancelDeadline()

	s.mu.Lock()
	s.running[ro] = stop
	if s.stopping {
		stop(ErrDraining)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, ro)
		s.mu.Unlock()
	}()

	beats := make(chan struct{})
	var hb sync.WaitGroup
	hb.Go(func() { s.heartbeat(life, endLife, rr, every, beats, log) })
	defer func() { close(beats); hb.Wait() }()

	log.LogAttrs(hctx, slog.LevelInfo, "rollout claimed",
		slog.Time("deadline", ro.Deadline), slog.Duration("clock_offset", offset), slog.Duration("heartbeat_every", every))

	var out RolloutOutput
	herr := s.prepare(ro)
	if herr == nil {
		defer func() {
			if err := os.RemoveAll(ro.PrivateDir); err != nil {
				log.LogAttrs(base, slog.LevelWarn, "remove private dir", slog.Any("error", err))
			}
		}()
		out, herr = s.callHandler(hctx, ro, log)
	}
	cause := error(nil)
	if hctx.Err() != nil {
		cause = context.Cause(hctx)
	}
	if errors.Is(cause, ErrLeaseLost) || errors.Is(cause, ErrRolloutFinished) {
		log.LogAttrs(base, slog.LevelWarn, "lease lost; the rollout was stopped and nothing more is reported", slog.Any("cause", cause))
		return
	}
	out = finishOutput(out, herr, cause, ro)
	s.submit(life, ro, out, log)
}

// prepare creates the rollout's directories.
func (s *server) prepare(ro *Rollout) error {
	rel := filepath.FromSlash(ro.Request.ArtifactsDir)
	if !filepath.IsLocal(rel) {
		return fmt.Errorf("artifacts_dir %q is not a relative path inside the worker root", ro.Request.ArtifactsDir)
	}
	ro.ArtifactsDir = filepath.Join(s.cfg.Root, rel)
	if err := os.MkdirAll(ro.ArtifactsDir, 0o750); err != nil {
		return fmt.Errorf("create artifacts dir: %w", err)
	}
	priv := filepath.Join(s.cfg.Root, ".private")
	if err := os.MkdirAll(priv, 0o700); err != nil {
		return fmt.Errorf("create private dir: %w", err)
	}
	dir, err := os.MkdirTemp(priv, "rollout-")
	if err != nil {
		return fmt.Errorf("create private dir: %w", err)
	}
	ro.PrivateDir = dir
	return nil
}

// errHandlerStuck reports a handler that did not return after its context
// ended.
var errHandlerStuck = errors.New("the handler did not return after it was stopped")

// callHandler runs the handler, recovering a panic, and gives up on it
// StopGrace after its context ended.
func (s *server) callHandler(ctx context.Context, ro *Rollout, log *slog.Logger) (RolloutOutput, error) {
	type result struct {
		out RolloutOutput
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				log.LogAttrs(context.WithoutCancel(ctx), slog.LevelError, "handler panicked",
					slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				ch <- result{err: fmt.Errorf("handler panicked: %v", p)}
			}
		}()
		out, err := s.h.HandleRollout(ctx, ro)
		ch <- result{out, err}
	}()
	select {
	case r := <-ch:
		return r.out, r.err
	case <-ctx.Done():
	}
	t := time.NewTimer(s.cfg.StopGrace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.out, r.err
	case <-t.C:
		log.LogAttrs(context.WithoutCancel(ctx), slog.LevelError, "handler still running after it was stopped; reporting without it",
			slog.Duration("stop_grace", s.cfg.StopGrace))
		return RolloutOutput{}, errHandlerStuck
	}
}

// finishOutput applies the rules Serve owns: a handler fault is
// flywheel_crash; a stop at the deadline is deadline_exceeded and a stop
// for the drain is cancelled, whatever the output said; tool_calls is
// always sent, null when absent; timing is filled when empty.
func finishOutput(out RolloutOutput, herr error, cause error, ro *Rollout) RolloutOutput {
	now := time.Now()
	if herr != nil {
		out = RolloutOutput{FinalText: ro.fallbackText(""), ToolCalls: Null[[]ToolCallRecord](),
			Exclusion: Some(Exclusion{Reason: ExclusionFlywheelCrash, Detail: Some(capText(herr.Error(), 1024))})}
	}
	switch {
	case errors.Is(cause, ErrRolloutDeadline):
		out.Exclusion = overrideExclusion(out.Exclusion, ExclusionDeadlineExceeded, "stopped at deadline_ts")
	case errors.Is(cause, ErrDraining):
		out.Exclusion = overrideExclusion(out.Exclusion, ExclusionCancelled, "the worker stopped the rollout while shutting down")
	}
	if out.ToolCalls.IsAbsent() {
		out.ToolCalls = Null[[]ToolCallRecord]()
	}
	if len(out.Timing) == 0 {
		out.Timing, _ = json.Marshal(map[string]any{
			"claimed_ts":  epochSeconds(ro.ClaimedAt.Add(ro.ClockOffset)),
			"finished_ts": epochSeconds(now.Add(ro.ClockOffset)),
			"duration_ms": now.Sub(ro.ClaimedAt).Milliseconds(),
		})
	}
	return out
}

func overrideExclusion(cur Optional[Exclusion], reason ExclusionReason, detail string) Optional[Exclusion] {
	if ex, ok := cur.Get(); ok && ex.Reason == reason {
		return cur
	}
	return Some(Exclusion{Reason: reason, Detail: Some(detail)})
}

// heartbeat beats every interval until done is closed. A lost or finished
// lease ends the rollout's life with the matching cause.
func (s *server) heartbeat(ctx context.Context, end context.CancelCauseFunc, rr RolloutRequest, every time.Duration,
	done <-chan struct{}, log *slog.Logger) {
	token := rr.LeaseToken.Or("")
	next := every
	for {
		t := time.NewTimer(next)
		select {
		case <-done:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
		err := s.cfg.Client.Heartbeat(bctx, rr.RolloutID, token)
		cancel()
		next = every
		var ae *APIError
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost):
			end(ErrLeaseLost)
			return
		case errors.Is(err, ErrRolloutFinished):
			end(ErrRolloutFinished)
			return
		case errors.As(err, &ae) && ae.StatusCode == 404:
			end(ErrLeaseLost)
			return
		case ctx.Err() != nil:
			return
		default:
			// Try again sooner; a lapsed lease shows up as 409 then.
			log.LogAttrs(ctx, slog.LevelWarn, "heartbeat failed", slog.Any("error", err))
			next = max(every/4, MinHeartbeat)
		}
	}
}

// submit sends out, retrying temporary failures until the server's grace
// after the deadline has passed. A 422 or 413 is followed once by a
// minimal valid output.
func (s *server) submit(ctx context.Context, ro *Rollout, out RolloutOutput, log *slog.Logger) {
	token := ro.Request.LeaseToken.Or("")
	raw, err := Marshal(DefRolloutOutput, out)
	fellBack := false
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "output breaks flywheel/1; submitting a minimal one", slog.Any("error", err))
		raw, err = Marshal(DefRolloutOutput, minimalOutput(ro, out, err))
		if err != nil {
			log.LogAttrs(ctx, slog.LevelError, "minimal output breaks flywheel/1", slog.Any("error", err))
			return
		}
		fellBack = true
	}
	giveUp := ro.Deadline.Add(ServerGrace)
	if soon := time.Now().Add(ServerGrace); soon.After(giveUp) {
		giveUp = soon
	}
	bo := backoff{base: 500 * time.Millisecond, max: 10 * time.Second}
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ans, err := s.cfg.Client.SubmitOutputJSON(sctx, ro.Request.RolloutID, token, raw)
		cancel()
		if err == nil {
			reason := ""
			if ex, ok := out.Exclusion.Get(); ok {
				reason = string(ex.Reason)
			}
			log.LogAttrs(ctx, slog.LevelInfo, "output submitted", slog.String("state", ans.State),
				slog.Bool("replayed", ans.Replayed), slog.String("exclusion", reason), slog.Bool("minimal", fellBack))
			return
		}
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			log.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, "lease lost before the output was accepted", slog.Any("cause", context.Cause(ctx)))
			return
		case !fellBack && errors.As(err, &ae) && (ae.StatusCode == 422 || ae.StatusCode == 413):
			log.LogAttrs(ctx, slog.LevelError, "server rejected the output; submitting a minimal one", slog.Any("error", err))
			raw, err = Marshal(DefRolloutOutput, minimalOutput(ro, out, err))
			if err != nil {
				log.LogAttrs(ctx, slog.LevelError, "minimal output breaks flywheel/1", slog.Any("error", err))
				return
			}
			fellBack = true
			continue
		case IsTemporary(err) && time.Now().Before(giveUp):
			log.LogAttrs(ctx, slog.LevelWarn, "submitting the output failed; retrying", slog.Any("error", err))
			if !sleep(ctx, bo.next(RetryAfter(err))) {
				return
			}
			continue
		}
		log.LogAttrs(ctx, slog.LevelError, "output not accepted", slog.Any("error", err))
		return
	}
}

// minimalOutput is the output Serve falls back to after a rejection: the
// fallback text capped, tool_calls null, the exclusion kept, and an event
// saying what was rejected.
func minimalOutput(ro *Rollout, out RolloutOutput, rejection error) RolloutOutput {
	ev := map[string]any{"source": "gyre-worker", "type": "output_rejected", "message": capText(rejection.Error(), 2048)}
	var ae *APIError
	if errors.As(rejection, &ae) {
		ev["status"] = ae.StatusCode
		if ae.Code != "" {
			ev["code"] = ae.Code
		}
		if ae.Pointer != "" {
			ev["pointer"] = ae.Pointer
		}
	}
	var ve *ValidationError
	if errors.As(rejection, &ve) {
		ev["pointer"] = ve.First().Pointer
	}
	evRaw, _ := marshal(ev)
	m := RolloutOutput{
		FinalText: capText(ro.fallbackText(out.FinalText), FallbackTextLimit),
		ToolCalls: Null[[]ToolCallRecord](),
		Events:    []json.RawMessage{evRaw},
	}
	if ex, ok := out.Exclusion.Get(); ok && ex.Reason.Valid() {
		m.Exclusion = Some(Exclusion{Reason: ex.Reason, Detail: Some(capText(ex.Detail.Or(""), 1024))})
	}
	return m
}

// capText cuts s to at most n bytes at a rune boundary and makes it valid
// UTF-8.
func capText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// epochTime converts contract epoch seconds to a time.
func epochTime(ts float64) time.Time {
	sec := int64(ts)
	return time.Unix(sec, int64((ts-float64(sec))*1e9))
}

// epochSeconds converts a time to contract epoch seconds (microseconds).
func epochSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
