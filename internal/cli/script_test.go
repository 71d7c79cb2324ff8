package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"gyre": func() { os.Exit(Main()) },
	})
}

// TestScripts runs the CLI scripts in testdata/script. Besides the
// standard commands they have:
//
//	exitcode N prog args...  run prog and check that it exits with N
//	jsonget FIELD VAR        set $VAR to the string FIELD of the JSON
//	                         object on the last command's stdout
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
		var m map[string]any
		if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &m); err != nil {
			ts.Fatalf("jsonget: stdout is not a JSON object: %v", err)
		}
		v, ok := m[args[0]].(string)
		if !ok {
			ts.Fatalf("jsonget: stdout has no string %q", args[0])
		}
		ts.Setenv(args[1], v)
	},
}
