package grade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"time"
)

const (
	commandDefaultTimeout = 60 * time.Second
	commandMaxTimeout     = 600 * time.Second
	commandStdoutMax      = 1 << 20
	commandStderrTail     = 4 << 10
)

// commandGrader runs an executable with the graded item on stdin and reads
// a verdict from its stdout (SPEC §8).
type commandGrader struct {
	argv    []string
	timeout time.Duration
}

func parseCommand(c *config) (grader, error) {
	argv, _, err := c.strList("run", true)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, c.errf("run", "run must name an executable")
	}
	g := &commandGrader{argv: argv, timeout: commandDefaultTimeout}
	if raw, ok := c.take("timeout"); ok {
		d, err := parseTimeout(raw)
		if err != nil {
			return nil, c.errf("timeout", "%v", err)
		}
		if d > commandMaxTimeout {
			return nil, c.errf("timeout", "timeout must be at most %s", commandMaxTimeout)
		}
		g.timeout = d
	}
	return g, nil
}

// parseTimeout reads a positive duration: a Go duration string ("300s",
// "5m") or a number of seconds.
func parseTimeout(raw json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("timeout must be a positive duration like \"60s\" or a number of seconds")
		}
		return d, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f <= 0 || math.IsInf(f, 0) || f > 1e9 {
		return 0, fmt.Errorf("timeout must be a positive duration like \"60s\" or a number of seconds")
	}
	return time.Duration(f * float64(time.Second)), nil
}

func (g *commandGrader) grade(ctx context.Context, v *view, env *Env) Verdict {
	if env == nil || env.AllowCommand == nil || !env.AllowCommand(env.Subject, g.argv) {
		return abstain(ReasonGraderNotAllowed)
	}
	log := env.logger().With(slog.String("grader", "command"), slog.String("executable", g.argv[0]))
	stdin, err := json.Marshal(v.it)
	if err != nil {
		log.ErrorContext(ctx, "encode graded item", slog.Any("error", err))
		return abstain(ReasonGraderError)
	}
	dir, err := os.MkdirTemp("", "gyre-grader-")
	if err != nil {
		log.ErrorContext(ctx, "command grader temp dir", slog.Any("error", err))
		return abstain(ReasonGraderError)
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.argv[0], g.argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &capWriter{max: commandStdoutMax}
	stderr := &tailWriter{max: commandStderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 2 * time.Second
	isolate(cmd)
	err = cmd.Run()
	killGroup(cmd)
	switch {
	case ctx.Err() != nil:
		log.WarnContext(ctx, "command grader timed out", slog.Duration("timeout", g.timeout))
		return abstain(ReasonGraderError)
	case err != nil:
		log.WarnContext(ctx, "command grader failed", slog.Any("error", err), slog.String("stderr_tail", stderr.String()))
		return abstain(ReasonGraderError)
	case stdout.over:
		log.WarnContext(ctx, "command grader stdout over 1 MiB")
		return abstain(ReasonGraderError)
	}
	vd, err := parseCommandVerdict(stdout.buf.Bytes())
	if err != nil {
		log.WarnContext(ctx, "command grader output", slog.Any("error", err))
		return abstain(ReasonGraderError)
	}
	return vd
}

// parseCommandVerdict reads exactly {"pass": bool|null, "score"?: 0..1|null,
// "reason"?: string}.
func parseCommandVerdict(out []byte) (Verdict, error) {
	members, isObj, err := objectMembers(out)
	if err != nil || !isObj {
		return Verdict{}, errors.New("stdout is not one JSON object")
	}
	var vd Verdict
	seenPass := false
	for _, m := range members {
		switch m.key {
		case "pass":
			seenPass = true
			if !isNull(m.val) {
				var b bool
				if err := json.Unmarshal(m.val, &b); err != nil {
					return Verdict{}, errors.New("pass must be true, false or null")
				}
				vd.Pass = &b
			}
		case "score":
			if !isNull(m.val) {
				var f float64
				if err := json.Unmarshal(m.val, &f); err != nil || f < 0 || f > 1 {
					return Verdict{}, errors.New("score must be a number from 0 to 1")
				}
				vd.Score = &f
			}
		case "reason":
			if !isNull(m.val) {
				var s string
				if err := json.Unmarshal(m.val, &s); err != nil {
					return Verdict{}, errors.New("reason must be a string")
				}
				vd.Reason = oneLine(s)
			}
		default:
			return Verdict{}, fmt.Errorf("unknown key %q", m.key)
		}
	}
	if !seenPass {
		return Verdict{}, errors.New("missing pass")
	}
	if vd.Pass == nil && vd.Reason == "" {
		vd.Reason = ReasonGraderError
	}
	return vd, nil
}

// capWriter keeps the first max bytes and notes whether more came; it
// never blocks the writer.
type capWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

// Write keeps what fits and reports everything as written.
func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		if len(p) > room {
			w.buf.Write(p[:room])
			w.over = true
		} else {
			w.buf.Write(p)
		}
	} else if len(p) > 0 {
		w.over = true
	}
	return len(p), nil
}

// tailWriter keeps the last max bytes.
type tailWriter struct {
	buf []byte
	max int
}

// Write appends p, keeping only the tail.
func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

// String returns the kept tail.
func (w *tailWriter) String() string { return string(w.buf) }

// CommandArgv returns the argv of a command grader, nil for every other
// grader, so that a server can check it against its allow-list before
// accepting a suite (SPEC §8: 422 grader_not_allowed).
func (s Spec) CommandArgv() []string {
	if g, ok := s.g.(*commandGrader); ok {
		return append([]string(nil), g.argv...)
	}
	return nil
}
