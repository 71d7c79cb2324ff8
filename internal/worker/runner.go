//go:build unix

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/flywheel"
)

// Config configures a Runner.
type Config struct {
	// Argv is the agent command and its arguments. Required.
	Argv []string
	// Env names the extra variables the agent gets.
	Env EnvSpec
	// LookupEnv reads the worker's own environment (os.LookupEnv in
	// production). It is only ever read: the worker never changes its
	// environment. Required.
	LookupEnv func(string) (string, bool)
	// KillGrace is the time between SIGTERM and SIGKILL (default 10 s).
	KillGrace time.Duration
	// Preflight asks the rollout's gateway for its models before spawning
	// the agent: a 503 no_policy answer ends the rollout with exclusion
	// substrate_unavailable without running the agent.
	Preflight bool
	// HTTPClient makes the preflight request; nil uses a client with a
	// 5 s timeout.
	HTTPClient *http.Client
	// Artifacts are the artifact caps.
	Artifacts ArtifactLimits
	// Logger receives per-rollout logs; nil discards them.
	Logger *slog.Logger
}

// Runner is the flywheel.Handler of gyre worker: it runs the agent command
// as a subprocess per rollout (SPEC §5).
type Runner struct {
	cfg Config
}

// NewRunner checks cfg and returns a Runner.
func NewRunner(cfg Config) (*Runner, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, errors.New("worker: an agent command is required")
	}
	if cfg.LookupEnv == nil {
		return nil, errors.New("worker: LookupEnv is required")
	}
	for _, n := range cfg.Env.Pass {
		if err := checkName(n); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	for n := range cfg.Env.Set {
		if err := checkName(n); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg}, nil
}

// Private file names inside a rollout's private directory.
const (
	turnInputName = "turn_input"
	reportName    = "report.json"
)

// HandleRollout runs the agent for one rollout and builds its output from
// the agent's report, stdout, stderr, exit status and artifacts.
func (r *Runner) HandleRollout(ctx context.Context, ro *flywheel.Rollout) (flywheel.RolloutOutput, error) {
	log := r.cfg.Logger.With(slog.String("rollout_id", ro.Request.RolloutID))
	inputPath := filepath.Join(ro.PrivateDir, turnInputName)
	reportPath := filepath.Join(ro.PrivateDir, reportName)
	if err := os.WriteFile(inputPath, []byte(ro.Request.TurnInput), 0o600); err != nil {
		return flywheel.RolloutOutput{}, fmt.Errorf("write turn input: %w", err)
	}
	env := buildEnv(r.cfg.LookupEnv, r.cfg.Env, rolloutEnv{
		req: ro.Request, turnInputFile: inputPath, artifactsDir: ro.ArtifactsDir, reportPath: reportPath,
	})
	if r.cfg.Preflight {
		if out, stop := r.preflight(ctx, ro, log); stop {
			return out, nil
		}
	}

	res := runProcess(ctx, r.cfg.Argv, env, ro.Request.TurnInput, r.cfg.KillGrace)
	if res.startErr != nil {
		log.LogAttrs(ctx, slog.LevelError, "agent command could not start", slog.Any("error", res.startErr))
		return flywheel.RolloutOutput{
			FinalText: "",
			ToolCalls: flywheel.NotReported(),
			Exclusion: flywheel.Some(flywheel.Exclusion{Reason: flywheel.ExclusionEntrypointError,
				Detail: flywheel.Some(res.startErr.Error())}),
		}, nil
	}
	log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "agent exited", slog.Int("exit_code", res.exitCode),
		slog.String("signal", res.signal), slog.Any("stopped", res.stopCause), slog.Duration("took", res.ended.Sub(res.started)))

	var events []json.RawMessage
	stdout := strings.TrimSpace(strings.ToValidUTF8(string(res.stdout), "\uFFFD"))
	ro.SetFallbackText(stdout)
	if res.stdoutBytes > int64(len(res.stdout)) {
		events = append(events, event("stdout_truncated", "bytes", res.stdoutBytes, "kept", len(res.stdout)))
	}

	out := flywheel.RolloutOutput{FinalText: stdout, ToolCalls: flywheel.NotReported()}
	rep, found, err := readReport(reportPath)
	switch {
	case err != nil:
		ev := map[string]any{"message": err.Error()}
		var ve *flywheel.ValidationError
		if errors.As(err, &ve) {
			ev["pointer"] = ve.First().Pointer
			ev["message"] = ve.First().Message
		}
		events = append(events, event("report_ignored", "reason", ev))
		log.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, "agent report ignored", slog.Any("error", err))
	case found:
		out = applyReport(out, rep)
	}

	out.Exclusion = exclusionFor(res, out.Exclusion)
	events = append(events, exitEvent(res))
	if len(res.stderrTail) > 0 {
		tail := trimToRunes(res.stderrTail)
		events = append(events, event("stderr", "tail", tail, "bytes", res.stderrBytes,
			"truncated", res.stderrBytes > int64(len(res.stderrTail))))
	}

	arts, artEvents := CollectArtifacts(ro.Root, ro.Request.ArtifactsDir, r.cfg.Artifacts)
	out.Artifacts = arts
	events = append(events, artEvents...)
	out.Events = append(out.Events, events...)

	out.Timing, _ = json.Marshal(map[string]any{
		"claimed_ts":  epochSeconds(ro.ClaimedAt.Add(ro.ClockOffset)),
		"started_ts":  epochSeconds(res.started.Add(ro.ClockOffset)),
		"ended_ts":    epochSeconds(res.ended.Add(ro.ClockOffset)),
		"duration_ms": res.ended.Sub(res.started).Milliseconds(),
	})
	return out, nil
}

// applyReport takes the agent's fields from its report. final_text falls
// back to stdout; tool_calls stays null unless the report has it.
func applyReport(out flywheel.RolloutOutput, rep flywheel.Report) flywheel.RolloutOutput {
	if rep.FinalText != nil {
		out.FinalText = *rep.FinalText
	}
	if !rep.ToolCalls.IsAbsent() {
		out.ToolCalls = rep.ToolCalls
	}
	out.ToolCallsOmittedCount = rep.ToolCallsOmittedCount
	out.LLMCallCount = rep.LLMCallCount
	out.Success = rep.Success
	out.Reward = rep.Reward
	out.Events = append(out.Events, rep.Events...)
	out.Exclusion = rep.Exclusion
	out.AgentFingerprint = rep.AgentFingerprint
	return out
}

// exclusionFor maps how the agent ended to an exclusion (SPEC §5): a stop
// at the deadline is deadline_exceeded and one for the drain cancelled,
// whatever the report says; a non-zero exit keeps the report's exclusion
// or is agent_exit_nonzero; a clean exit keeps the report's.
func exclusionFor(res procResult, reported flywheel.Optional[flywheel.Exclusion]) flywheel.Optional[flywheel.Exclusion] {
	ex := func(reason flywheel.ExclusionReason, detail string) flywheel.Optional[flywheel.Exclusion] {
		return flywheel.Some(flywheel.Exclusion{Reason: reason, Detail: flywheel.Some(detail)})
	}
	switch {
	case errors.Is(res.stopCause, flywheel.ErrRolloutDeadline):
		return ex(flywheel.ExclusionDeadlineExceeded, "the agent was stopped at deadline_ts")
	case errors.Is(res.stopCause, flywheel.ErrDraining):
		return ex(flywheel.ExclusionCancelled, "the worker stopped the agent while shutting down")
	case res.stopCause != nil:
		return ex(flywheel.ExclusionCancelled, "the worker stopped the agent: "+res.stopCause.Error())
	case res.exitCode == 0:
		return reported
	case reported.IsSet():
		return reported
	case res.signal != "":
		return ex(flywheel.ExclusionAgentExitNonzero, "the agent was killed by signal "+res.signal)
	}
	return ex(flywheel.ExclusionAgentExitNonzero, fmt.Sprintf("the agent exited with status %d", res.exitCode))
}

func exitEvent(res procResult) json.RawMessage {
	kv := []any{"exit_code", res.exitCode, "duration_ms", res.ended.Sub(res.started).Milliseconds()}
	if res.signal != "" {
		kv = append(kv, "signal", res.signal)
	}
	if res.stopCause != nil {
		kv = append(kv, "stopped", res.stopCause.Error(), "sigkill", res.killed)
	}
	return event("exit", kv...)
}

// readReport reads the agent's report, if it wrote one. found is false
// when there is none; err says why one was ignored.
func readReport(path string) (rep flywheel.Report, found bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, false, nil
	}
	if err != nil {
		return rep, true, fmt.Errorf("stat report: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return rep, true, errors.New("the report is not a regular file")
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return rep, true, fmt.Errorf("open report: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, flywheel.MaxReportBytes+1))
	if err != nil {
		return rep, true, fmt.Errorf("read report: %w", err)
	}
	rep, err = flywheel.ParseReport(b)
	return rep, true, err
}

// preflight asks the gateway for its models; a 503 no_policy answer ends
// the rollout with substrate_unavailable. Any other answer, or none, lets
// the agent run.
func (r *Runner) preflight(ctx context.Context, ro *flywheel.Rollout, log *slog.Logger) (flywheel.RolloutOutput, bool) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, strings.TrimRight(ro.Request.LLMURL, "/")+"/models", nil)
	if err != nil {
		return flywheel.RolloutOutput{}, false
	}
	req.Header.Set("Authorization", "Bearer "+ro.Request.APIKey)
	resp, err := r.cfg.HTTPClient.Do(req)
	if err != nil {
		return flywheel.RolloutOutput{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		return flywheel.RolloutOutput{}, false
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &body) != nil || body.Error.Code != "no_policy" {
		return flywheel.RolloutOutput{}, false
	}
	log.LogAttrs(ctx, slog.LevelWarn, "the gateway has no policy for this rollout; not running the agent")
	return flywheel.RolloutOutput{
		FinalText: "",
		ToolCalls: flywheel.NotReported(),
		Exclusion: flywheel.Some(flywheel.Exclusion{Reason: flywheel.ExclusionSubstrateUnavailable,
			Detail: flywheel.Some("the rollout's gateway answered 503 no_policy: the batch has no policy")}),
		Events: []json.RawMessage{event("preflight", "status", resp.StatusCode, "code", body.Error.Code)},
	}, true
}

// event is one of the worker's own events entries.
func event(typ string, kv ...any) json.RawMessage {
	m := map[string]any{"source": "gyre-worker", "type": typ}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return b
}

// trimToRunes makes a byte tail valid UTF-8, dropping a rune cut in half
// at its start.
func trimToRunes(b []byte) string {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			b = b[i:]
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func epochSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
