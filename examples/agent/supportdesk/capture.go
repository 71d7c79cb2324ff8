package supportdesk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// The environment of production mode: with the first three set, and the
// agent not under gyre worker, each turn it answers is sent to gyre's
// POST /turns through flywheel.Attach.
const (
	// EnvCaptureURL is the gyre server's base URL, e.g. http://127.0.0.1:7070.
	EnvCaptureURL = "GYRE_CAPTURE_URL"
	// EnvCaptureKey is an agent key of the tenant (gyre keys create --role agent).
	EnvCaptureKey = "GYRE_CAPTURE_KEY"
	// EnvCaptureAgent is the agent id the turns are filed under.
	EnvCaptureAgent = "GYRE_CAPTURE_AGENT"
	// EnvConversationID is the turn's conversation_id (optional; default
	// a fresh id, a conversation of one turn).
	EnvConversationID = "GYRE_CONVERSATION_ID"
	// EnvTurnID is the turn's turn_id (optional; default a fresh id). A
	// repeated turn id is a duplicate the server keeps once.
	EnvTurnID = "GYRE_TURN_ID"
)

// captureCloseTimeout bounds the wait for the turn to reach the server.
const captureCloseTimeout = 30 * time.Second

// capture is production mode's settings.
type capture struct {
	client                *flywheel.Client
	agentID, conv, turnID string
}

// captureFromEnv reads production mode's settings: nil when
// GYRE_CAPTURE_URL is unset or the agent runs under gyre worker (a
// rollout is not production traffic).
func captureFromEnv(lookupEnv func(string) (string, bool), underWorker bool) (*capture, error) {
	get := func(k string) string { v, _ := lookupEnv(k); return v }
	url := get(EnvCaptureURL)
	if url == "" || underWorker {
		return nil, nil
	}
	key, agentID := get(EnvCaptureKey), get(EnvCaptureAgent)
	if key == "" || agentID == "" {
		return nil, fmt.Errorf("production mode needs %s and %s besides %s", EnvCaptureKey, EnvCaptureAgent, EnvCaptureURL)
	}
	if err := flywheel.ValidateAgentID(agentID); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCaptureAgent, err)
	}
	client, err := flywheel.NewClient(url, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCaptureURL, err)
	}
	c := &capture{client: client, agentID: agentID, conv: get(EnvConversationID), turnID: get(EnvTurnID)}
	if c.conv == "" {
		c.conv = "conv-" + flywheel.NewTurnID()
	}
	return c, nil
}

// send captures one turn and waits until the server has it: exactly one
// turn accepted (or known already), else an error saying what happened.
func (c *capture) send(ctx context.Context, input, answer string, answered bool, calls []flywheel.ToolCallRecord,
	fingerprint map[string]any, stderr io.Writer) error {
	cp, err := flywheel.Attach(flywheel.AttachConfig{Client: c.client, AgentID: c.agentID, BatchSize: 1})
	if err != nil {
		return err
	}
	fp, _ := json.Marshal(fingerprint)
	if calls == nil {
		calls = []flywheel.ToolCallRecord{} // observed: no call, not "not reported"
	}
	idx := 0
	turn := flywheel.ProductionTurn{TurnID: c.turnID, ConversationID: &c.conv, TurnIndex: &idx,
		InputText: &input, ToolCalls: calls, AgentFingerprint: fp}
	if answered {
		turn.FinalText = &answer
	}
	id, addErr := cp.Add(turn)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), captureCloseTimeout)
	defer cancel()
	closeErr := cp.Close(cctx)
	if err := errors.Join(addErr, closeErr); err != nil {
		return err
	}
	st := cp.Stats()
	switch {
	case st.Accepted == 1:
		fmt.Fprintf(stderr, "agent: captured turn %s (conversation %s) for agent %s\n", id, c.conv, c.agentID)
	case st.Duplicates == 1:
		fmt.Fprintf(stderr, "agent: turn %s was captured before (a duplicate, kept once)\n", id)
	default:
		return fmt.Errorf("turn %s not captured: %d rejected, %d failed (see the server's log)", id, st.Rejected, st.Failed)
	}
	return nil
}
