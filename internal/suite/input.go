package suite

import (
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/jcs"
)

// TaskInput is the turn_input of a task made from a case input (SPEC §4.2):
// input.question when the input has exactly one key, question, holding a
// string; otherwise the JCS text of the input.
func TaskInput(input []byte) (string, error) {
	v, err := jcs.Parse(input)
	if err != nil {
		return "", fmt.Errorf("task input: %w", err)
	}
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if q, ok := m["question"].(string); ok {
			return q, nil
		}
	}
	c, err := jcs.Append(nil, v)
	if err != nil {
		return "", fmt.Errorf("task input: %w", err)
	}
	return string(c), nil
}

// TurnInput is the case's turn_input. A case with files cannot become a
// task, since a RolloutRequest has no file channel: that is an error with
// code files_unsupported pointing at the case's files.
func (c Case) TurnInput() (string, error) {
	if len(c.Files) > 0 {
		return "", &Error{Code: gyre.CodeFilesUnsupported, Pointer: c.Pointer + "/files",
			Message: fmt.Sprintf("case %q has files, and a rollout has no file channel", c.ID)}
	}
	return TaskInput(c.Input)
}
