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
