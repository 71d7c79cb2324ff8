package flywheel

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// The environment gyre worker gives an agent it spawns (SPEC §5). Besides
// these, OPENAI_BASE_URL and OPENAI_API_BASE hold the rollout's gateway URL
// and OPENAI_API_KEY its key, which OpenAI clients read on their own.
const (
	EnvRolloutID     = "GYRE_ROLLOUT_ID"
	EnvTurnInput     = "GYRE_TURN_INPUT"
	EnvTurnInputFile = "GYRE_TURN_INPUT_FILE"
	EnvArtifactsDir  = "GYRE_ARTIFACTS_DIR"
	EnvDeadlineTS    = "GYRE_DEADLINE_TS"
	EnvReport        = ReportEnv
)

// AgentEnv is what an agent spawned by gyre worker learns from its
// environment. It holds no secret.
type AgentEnv struct {
	// RolloutID is the rollout being run.
	RolloutID string
	// TurnInputFile is the file holding the turn input.
	TurnInputFile string
	// ArtifactsDir is the absolute directory for the rollout's artifacts.
	ArtifactsDir string
	// Deadline is deadline_ts, or zero when absent.
	Deadline time.Time
	// ReportPath is where the report goes (GYRE_REPORT).
	ReportPath string

	turnInput    string
	hasTurnInput bool
}

// LoadAgentEnv reads the agent's environment. ok is false when the
// process does not run under gyre worker (GYRE_ROLLOUT_ID is unset).
func LoadAgentEnv() (env AgentEnv, ok bool) {
	env.RolloutID = os.Getenv(EnvRolloutID)
	if env.RolloutID == "" {
		return AgentEnv{}, false
	}
	env.TurnInputFile = os.Getenv(EnvTurnInputFile)
	env.ArtifactsDir = os.Getenv(EnvArtifactsDir)
	env.ReportPath = os.Getenv(EnvReport)
	env.turnInput, env.hasTurnInput = os.LookupEnv(EnvTurnInput)
	if v := os.Getenv(EnvDeadlineTS); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			env.Deadline = epochTime(f)
		}
	}
	return env, true
}

// TurnInput returns the turn input: GYRE_TURN_INPUT when set (inputs under
// 64 KiB), otherwise the content of GYRE_TURN_INPUT_FILE.
func (e AgentEnv) TurnInput() (string, error) {
	if e.hasTurnInput {
		return e.turnInput, nil
	}
	if e.TurnInputFile == "" {
		return "", errors.New("flywheel: neither GYRE_TURN_INPUT nor GYRE_TURN_INPUT_FILE is set")
	}
	b, err := os.ReadFile(e.TurnInputFile)
	if err != nil {
		return "", fmt.Errorf("flywheel: read turn input: %w", err)
	}
	return string(b), nil
}
