package harnesskit_test

import (
	"encoding/json"
	"fmt"

	"github.com/gyrehq/gyre/harnesskit"
)

// An evaluator polls GET /runs/{id} until the status is terminal.
func ExampleRunStatus_IsTerminal() {
	for _, body := range []string{
		`{"status":"running","model":"gpt-4.1"}`,
		`{"status":"completed","model":"gpt-4.1","answer":"4"}`,
	} {
		var s harnesskit.RunStatus
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(s.Status, s.IsTerminal())
	}
	// Output:
	// running false
	// completed true
}

// Capabilities keeps members the contract does not name, so a snapshot is
// complete.
func ExampleCapabilities() {
	var c harnesskit.Capabilities
	_ = json.Unmarshal([]byte(`{"agent":"acme","accepts":{"stop":true},"vendor_tier":"gold"}`), &c)
	fmt.Println(c.Agent, c.Version(), c.Accepts.Stop, string(c.Extra["vendor_tier"]))
	b, _ := json.Marshal(c)
	fmt.Println(string(b))
	// Output:
	// acme v1 true "gold"
	// {"agent":"acme","accepts":{"files":false,"file_urls":false,"model_override":false,"stop":true},"vendor_tier":"gold"}
}
