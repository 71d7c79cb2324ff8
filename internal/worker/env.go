package worker

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/flywheel"
)

// anthropicBaseURL is a claim's llm_url (the OpenAI-style base, ending in
// /v1) without its /v1: the gateway root that Anthropic SDKs expect in
// ANTHROPIC_BASE_URL (SPEC §5, §6.1).
func anthropicBaseURL(llmURL string) string {
	u := strings.TrimRight(llmURL, "/")
	return strings.TrimSuffix(u, "/v1")
}

// BaseEnv are the variables of the worker's own environment that every
// child gets when they are set (SPEC §5). Nothing else is inherited unless
// named.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR"}

// TurnInputEnvLimit is the size under which the turn input is also put in
// GYRE_TURN_INPUT; it is always in the file GYRE_TURN_INPUT_FILE names.
const TurnInputEnvLimit = 64 << 10

// EnvSpec names the extra variables a child gets: the operator's --env and
// --env-file.
type EnvSpec struct {
	// Pass names variables copied from the worker's environment when set.
	Pass []string
	// Set holds fixed values.
	Set map[string]string
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkName refuses names a child may not be given: malformed ones, and
// GYRE_* (the worker's own key and settings live there; gyre sets the
// child's GYRE_* variables itself).
func checkName(name string) error {
	if !envNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a valid environment variable name", name)
	}
	if strings.HasPrefix(strings.ToUpper(name), "GYRE_") {
		return fmt.Errorf("%s: GYRE_* variables are reserved: the worker never passes its own to the agent", name)
	}
	return nil
}

// ParseEnvFlag adds one --env value to s: NAME passes the worker's
// variable, NAME=VALUE sets a value.
func (s *EnvSpec) ParseEnvFlag(v string) error {
	name, value, hasValue := strings.Cut(v, "=")
	if err := checkName(name); err != nil {
		return err
	}
	if hasValue {
		if s.Set == nil {
			s.Set = map[string]string{}
		}
		s.Set[name] = value
		return nil
	}
	if !slices.Contains(s.Pass, name) {
		s.Pass = append(s.Pass, name)
	}
	return nil
}

// ParseEnvFile adds the lines of an --env-file to s: NAME=VALUE sets a
// value (taken literally, no quote processing), a bare NAME passes the
// worker's variable; blank lines and lines starting with # are skipped.
func (s *EnvSpec) ParseEnvFile(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if name, value, ok := strings.Cut(line, "="); ok {
			line = strings.TrimSpace(name) + "=" + value
		} else {
			line = t
		}
		if err := s.ParseEnvFlag(line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	return sc.Err()
}

// rolloutEnv are gyre's own variables for one rollout.
type rolloutEnv struct {
	req           flywheel.RolloutRequest
	turnInputFile string
	artifactsDir  string
	reportPath    string
}

// BuildEnv returns a child's environment: BaseEnv and spec.Pass from the
// worker's environment (read through lookup, never modified), then
// spec.Set, then gyre's own variables for the rollout, which win.
func buildEnv(lookup func(string) (string, bool), spec EnvSpec, own rolloutEnv) []string {
	env := map[string]string{}
	for _, name := range slices.Concat(BaseEnv, spec.Pass) {
		if v, ok := lookup(name); ok {
			env[name] = v
		}
	}
	for k, v := range spec.Set {
		env[k] = v
	}
	req := own.req
	env["OPENAI_BASE_URL"] = req.LLMURL
	env["OPENAI_API_BASE"] = req.LLMURL
	env["OPENAI_API_KEY"] = req.APIKey
	// Anthropic SDKs add /v1/messages to their base URL themselves.
	env["ANTHROPIC_BASE_URL"] = anthropicBaseURL(req.LLMURL)
	env["ANTHROPIC_API_KEY"] = req.APIKey
	env[flywheel.EnvRolloutID] = req.RolloutID
	env[flywheel.EnvTurnInputFile] = own.turnInputFile
	if len(req.TurnInput) < TurnInputEnvLimit && !strings.ContainsRune(req.TurnInput, 0) {
		env[flywheel.EnvTurnInput] = req.TurnInput
	}
	env[flywheel.EnvArtifactsDir] = own.artifactsDir
	env[flywheel.EnvDeadlineTS] = strconv.FormatFloat(req.DeadlineTS, 'f', -1, 64)
	env[flywheel.EnvReport] = own.reportPath
	out := make([]string, 0, len(env))
	for k, v := range env {
		if strings.ContainsRune(v, 0) {
			continue // cannot be passed through exec
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
