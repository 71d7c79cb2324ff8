package demo

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

// AgentSuiteName is the name of the rollout suite written for the example
// support-desk agent (agentsuite/suite.yaml).
const AgentSuiteName = "demo-support-desk-agent"

// TroubleCases are the agent suite's cases that meet the example agent's
// infrastructure trouble by design (scripted.TroubleQuestions): D4's
// backend is down, so its rollouts are excluded, and E5's refund is
// unconfirmed, so its outcome graders abstain. gyre demo runs them in its
// batch, to show that trouble is not a model failure, and keeps them out
// of the promotion: they measure no policy, and the gate would rightly
// refuse a task set whose rollouts are excluded more often than its
// max_excluded_rate (5%).
var TroubleCases = []string{"status-backend-unavailable", "cancel-backend-unavailable", "refund-payment-timeout"}

//go:embed agentsuite/suite.yaml
var agentSuite []byte

// AgentSuite returns the rollout suite for the example agent, as YAML.
func AgentSuite() []byte { return agentSuite }

// WriteAgentSuite writes the agent's rollout suite to
// dir/demo-support-desk-agent.yaml (dir created if needed), replacing the
// file written before, and returns its path, which gyre suites push reads.
func WriteAgentSuite(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write the agent suite: %w", err)
	}
	p := filepath.Join(dir, AgentSuiteName+".yaml")
	if err := writeFile(p, agentSuite); err != nil {
		return "", fmt.Errorf("write the agent suite: %w", err)
	}
	return p, nil
}
