// Command agent is a small support-desk agent: an OpenAI chat model with
// three tools over an in-memory order system (lookup_order, cancel_order,
// issue_refund). It is an ordinary program — it reads its question, prints
// its answer — that also speaks gyre's side channel when it runs under
// gyre worker, and captures its production turns when GYRE_CAPTURE_URL,
// GYRE_CAPTURE_KEY and GYRE_CAPTURE_AGENT are set. Its code is in package
// supportdesk, which gyre demo runs too.
//
// On its own:
//
//	OPENAI_API_KEY=sk-… go run ./examples/agent "Please refund order C3, it arrived broken."
//
// Under gyre worker (see README.md):
//
//	gyre worker --server http://127.0.0.1:7070 --agent support-bot --key-file agent.key \
//	    --env AGENT_MODEL -- ./support-agent
package main

import (
	"os"

	"github.com/gyrehq/gyre/examples/agent/supportdesk"
)

func main() { os.Exit(supportdesk.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
