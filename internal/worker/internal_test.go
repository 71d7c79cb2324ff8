//go:build unix

package worker

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/flywheel"
)

func TestBuildEnv_AllowList(t *testing.T) {
	t.Parallel()
	worker := map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp/w",
		"GYRE_KEY": "agent-key", "GYRE_SERVER": "http://gyre", "OPENAI_API_KEY": "sk-worker", "OPENAI_BASE_URL": "https://api.openai.com/v1",
		"OPENAI_ORG_ID": "org", "ANTHROPIC_API_KEY": "sk-ant", "AZURE_OPENAI_API_KEY": "az", "AZURE_OPENAI_ENDPOINT": "https://az",
		"MISTRAL_API_KEY": "m", "SOME_BASE_URL": "http://x", "USER": "w", "SHELL": "/bin/sh", "PASSED": "yes",
	}
	lookup := func(k string) (string, bool) { v, ok := worker[k]; return v, ok }
	req := flywheel.RolloutRequest{RolloutID: "r1", TurnInput: "hi", LLMURL: "https://gyre/gw/tok/v1", APIKey: "rollout-key", DeadlineTS: 1790000000.25}
	own := rolloutEnv{req: req, turnInputFile: "/root/.private/r/turn_input", artifactsDir: "/root/rollouts/r1", reportPath: "/root/.private/r/report.json"}

	for _, tc := range []struct {
		name string
		spec EnvSpec
		want map[string]string
	}{
		{
			name: "nothing named",
			want: map[string]string{},
		},
		{
			name: "named variables pass, provider credentials only when named",
			spec: EnvSpec{Pass: []string{"PASSED", "AZURE_OPENAI_API_KEY", "NOT_SET"}, Set: map[string]string{"AGENT_MODEL": "gpt-x"}},
			want: map[string]string{"PASSED": "yes", "AZURE_OPENAI_API_KEY": "az", "AGENT_MODEL": "gpt-x"},
		},
		{
			name: "gyre's own variables win over named ones",
			spec: EnvSpec{Pass: []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY"},
				Set: map[string]string{"OPENAI_BASE_URL": "http://elsewhere", "ANTHROPIC_BASE_URL": "https://api.anthropic.com"}},
			want: map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			for _, kv := range buildEnv(lookup, tc.spec, own) {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v
			}
			want := map[string]string{
				"PATH": "/usr/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp/w",
				"OPENAI_BASE_URL": req.LLMURL, "OPENAI_API_BASE": req.LLMURL, "OPENAI_API_KEY": "rollout-key",
				"ANTHROPIC_BASE_URL": "https://gyre/gw/tok", "ANTHROPIC_API_KEY": "rollout-key",
				"GYRE_ROLLOUT_ID": "r1", "GYRE_TURN_INPUT": "hi", "GYRE_TURN_INPUT_FILE": own.turnInputFile,
				"GYRE_ARTIFACTS_DIR": own.artifactsDir, "GYRE_DEADLINE_TS": "1790000000.25", "GYRE_REPORT": own.reportPath,
			}
			for k, v := range tc.want {
				want[k] = v
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("child environment (-want +got):\n%s", d)
			}
		})
	}
}

func TestAnthropicBaseURL_IsTheGatewayRootWithoutV1(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://gyre.example/gw/tok/v1":  "https://gyre.example/gw/tok",
		"https://gyre.example/gw/tok/v1/": "https://gyre.example/gw/tok",
		"http://127.0.0.1:7070/x/gw/t/v1": "http://127.0.0.1:7070/x/gw/t",
		"https://gyre.example/gw/tok":     "https://gyre.example/gw/tok",
	} {
		if got := anthropicBaseURL(in); got != want {
			t.Errorf("anthropicBaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildEnv_TurnInputVariableOnlyWhenSmall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		input string
		set   bool
	}{
		{strings.Repeat("x", TurnInputEnvLimit-1), true},
		{strings.Repeat("x", TurnInputEnvLimit), false},
		{"has a \x00 byte", false},
	} {
		env := buildEnv(func(string) (string, bool) { return "", false }, EnvSpec{},
			rolloutEnv{req: flywheel.RolloutRequest{TurnInput: tc.input}})
		has := slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GYRE_TURN_INPUT=") })
		if has != tc.set {
			t.Errorf("input of %d bytes: GYRE_TURN_INPUT set = %t, want %t", len(tc.input), has, tc.set)
		}
	}
}

func TestEnvSpec_Parse(t *testing.T) {
	t.Parallel()
	var s EnvSpec
	for _, f := range []string{"FOO", "BAR=baz=qux", "FOO", "EMPTY="} {
		if err := s.ParseEnvFlag(f); err != nil {
			t.Fatal(err)
		}
	}
	file := "# comment\n\nexport_ok=1\n  SPACED = kept as is \nPASS_ME\r\n"
	if err := s.ParseEnvFile(strings.NewReader(file)); err != nil {
		t.Fatal(err)
	}
	want := EnvSpec{Pass: []string{"FOO", "PASS_ME"}, Set: map[string]string{"BAR": "baz=qux", "EMPTY": "", "export_ok": "1", "SPACED": " kept as is "}}
	if d := cmp.Diff(want, s); d != "" {
		t.Errorf("spec (-want +got):\n%s", d)
	}
	for _, bad := range []string{"GYRE_KEY", "gyre_x=1", "1X", "A-B", "", "=v"} {
		if err := (&EnvSpec{}).ParseEnvFlag(bad); err == nil {
			t.Errorf("ParseEnvFlag(%q) accepted", bad)
		}
	}
	if err := (&EnvSpec{}).ParseEnvFile(strings.NewReader("OK=1\nGYRE_ROOT=/x\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ParseEnvFile = %v, want an error at line 2", err)
	}
}

func TestExclusionFor(t *testing.T) {
	t.Parallel()
	reported := flywheel.Some(flywheel.Exclusion{Reason: flywheel.ExclusionCredentialExpired})
	for _, tc := range []struct {
		name     string
		res      procResult
		reported flywheel.Optional[flywheel.Exclusion]
		want     flywheel.ExclusionReason // "" for none
	}{
		{"clean exit", procResult{exitCode: 0}, flywheel.Optional[flywheel.Exclusion]{}, ""},
		{"clean exit keeps the report's", procResult{exitCode: 0}, reported, flywheel.ExclusionCredentialExpired},
		{"non-zero exit", procResult{exitCode: 2}, flywheel.Optional[flywheel.Exclusion]{}, flywheel.ExclusionAgentExitNonzero},
		{"non-zero exit with a report's exclusion", procResult{exitCode: 1}, reported, flywheel.ExclusionCredentialExpired},
		{"killed by a signal of its own", procResult{exitCode: -1, signal: "segmentation fault"}, flywheel.Optional[flywheel.Exclusion]{}, flywheel.ExclusionAgentExitNonzero},
		{"stopped at the deadline", procResult{exitCode: -1, stopCause: flywheel.ErrRolloutDeadline}, reported, flywheel.ExclusionDeadlineExceeded},
		{"stopped at the deadline, exited 0", procResult{exitCode: 0, stopCause: flywheel.ErrRolloutDeadline}, flywheel.Optional[flywheel.Exclusion]{}, flywheel.ExclusionDeadlineExceeded},
		{"stopped for the drain", procResult{exitCode: 143, stopCause: flywheel.ErrDraining}, reported, flywheel.ExclusionCancelled},
		{"stopped for a lost lease", procResult{exitCode: 143, stopCause: flywheel.ErrLeaseLost}, flywheel.Optional[flywheel.Exclusion]{}, flywheel.ExclusionCancelled},
	} {
		got := exclusionFor(tc.res, tc.reported)
		ex, ok := got.Get()
		if (tc.want == "") == ok || (ok && ex.Reason != tc.want) {
			t.Errorf("%s: exclusion = %+v, want %q", tc.name, got, tc.want)
		}
	}
}

func TestReadHeadAndTail(t *testing.T) {
	t.Parallel()
	data := strings.Repeat("0123456789", 10000)
	head, n := readHead(strings.NewReader(data), 1000)
	if string(head) != data[:1000] || n != int64(len(data)) {
		t.Errorf("readHead kept %d bytes of %d", len(head), n)
	}
	tail, n := readTail(strings.NewReader(data), 1000)
	if string(tail) != data[len(data)-1000:] || n != int64(len(data)) {
		t.Errorf("readTail kept %d bytes of %d", len(tail), n)
	}
	if got := trimToRunes([]byte("\xa9 tail é")); got != " tail é" {
		t.Errorf("trimToRunes = %q", got)
	}
}

func TestCollectArtifacts_InlineBudgetAndLimits(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "rollouts", "r1")
	must(t, os.MkdirAll(dir, 0o755))
	for _, name := range []string{"a.txt", "b.txt", "c.txt"} {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(strings.Repeat("x", 40)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "nul.txt"), []byte("a\x00b"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("y", 200)), 0o644))

	arts, events := CollectArtifacts(root, "rollouts/r1", ArtifactLimits{InlineFile: 64, InlineTotal: 100, TooLarge: 150})
	if len(events) != 0 {
		t.Errorf("events = %s", events)
	}
	// a and b fit the 100-byte budget in name order; c does not.
	for name, inline := range map[string]bool{"a.txt": true, "b.txt": true, "c.txt": false, "nul.txt": false} {
		if arts[name].IsInline() != inline {
			t.Errorf("%s inline = %t, want %t", name, arts[name].IsInline(), inline)
		}
		if err := arts[name].Verify(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if arts["big.txt"].Digest != "skipped:too_large:200" {
		t.Errorf("big.txt = %+v", arts["big.txt"])
	}

	arts, events = CollectArtifacts(root, "rollouts/r1", ArtifactLimits{MaxFiles: 2})
	if len(arts) != 2 || len(events) != 1 || !strings.Contains(string(events[0]), "artifacts_truncated") {
		t.Errorf("MaxFiles 2: %d artifacts, events %s", len(arts), events)
	}
}

func TestCollectArtifacts_NeverFollowsTheDirectoryItself(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "rollouts"), 0o755))
	// The agent replaced its artifacts directory by a symlink out.
	must(t, os.Symlink(outside, filepath.Join(root, "rollouts", "r1")))
	arts, events := CollectArtifacts(root, "rollouts/r1", ArtifactLimits{})
	if arts != nil {
		t.Errorf("artifacts = %v: the symlinked directory was followed", arts)
	}
	if len(events) != 1 || !strings.Contains(string(events[0]), "symlink") {
		t.Errorf("events = %s", events)
	}
	// A missing directory is an event too, never an error.
	arts, events = CollectArtifacts(root, "rollouts/none", ArtifactLimits{})
	if arts != nil || len(events) != 1 {
		t.Errorf("missing dir: %v %s", arts, events)
	}
	var ev map[string]any
	_ = json.Unmarshal(events[0], &ev)
	if ev["source"] != "gyre-worker" || ev["type"] != "artifacts_unreadable" {
		t.Errorf("event = %v", ev)
	}
}

func TestReadReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, found, err := readReport(filepath.Join(dir, "none.json")); found || err != nil {
		t.Errorf("no report: found=%t err=%v", found, err)
	}
	must(t, os.Mkdir(filepath.Join(dir, "dir.json"), 0o755))
	if _, found, err := readReport(filepath.Join(dir, "dir.json")); !found || err == nil {
		t.Errorf("a directory as report: found=%t err=%v", found, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "target.json"), []byte(`{"final_text":"x"}`), 0o644))
	must(t, os.Symlink(filepath.Join(dir, "target.json"), filepath.Join(dir, "link.json")))
	if _, found, err := readReport(filepath.Join(dir, "link.json")); !found || err == nil {
		t.Errorf("a symlinked report: found=%t err=%v, want refused", found, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"final_text":1}`), 0o644))
	_, _, err := readReport(filepath.Join(dir, "bad.json"))
	var ve *flywheel.ValidationError
	if !errors.As(err, &ve) || ve.First().Pointer != "/final_text" {
		t.Errorf("bad report: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
