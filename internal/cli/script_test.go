package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	// gyre demo re-executes its own binary as the example agent
	// (os.Executable() "demo" "agent" …): in tests that binary is this
	// test binary, which then runs the agent as gyre would.
	if len(os.Args) > 2 && os.Args[1] == "demo" && os.Args[2] == "agent" {
		os.Exit(Main())
	}
	testscript.Main(m, map[string]func(){
		"gyre": func() { os.Exit(Main()) },
	})
}

// TestScripts runs the CLI scripts in testdata/script. Besides the
// standard commands they have:
//
//	exitcode N prog args...  run prog and check that it exits with N
//	jsonget FIELD VAR        set $VAR to the string FIELD of the JSON
//	                         on the last command's stdout; FIELD may be
//	                         a path such as items/0/rollout_id
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Cmds:                scriptCmds,
	})
}

// scriptCmds are the commands the CLI's testscript files add: exitcode
// and jsonget (see TestScripts).
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"exitcode": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 2 {
			ts.Fatalf("usage: exitcode N prog [args...]")
		}
		want, err := strconv.Atoi(args[0])
		if err != nil {
			ts.Fatalf("exitcode: %v", err)
		}
		got := 0
		if err := ts.Exec(args[1], args[2:]...); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				ts.Fatalf("exitcode: %v", err)
			}
			got = ee.ExitCode()
		}
		if got != want {
			ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
		}
	},
	"jsonget": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: jsonget FIELD VAR")
		}
		var v any
		if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &v); err != nil {
			ts.Fatalf("jsonget: stdout is not JSON: %v", err)
		}
		// FIELD is a member name, or a path of names and array indexes
		// separated by "/" (items/0/rollout_id).
		for _, part := range strings.Split(args[0], "/") {
			switch x := v.(type) {
			case map[string]any:
				v = x[part]
			case []any:
				i, err := strconv.Atoi(part)
				if err != nil || i < 0 || i >= len(x) {
					ts.Fatalf("jsonget: no element %q in %s", part, args[0])
				}
				v = x[i]
			default:
				ts.Fatalf("jsonget: %s does not lead to a string", args[0])
			}
		}
		str, ok := v.(string)
		if !ok {
			ts.Fatalf("jsonget: stdout has no string %q", args[0])
		}
		ts.Setenv(args[1], str)
	},
}
