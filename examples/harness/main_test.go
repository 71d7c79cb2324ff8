package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/examples/harness/desk/desktest"
	"github.com/gyrehq/gyre/harnesskit"
)

// The program as `go run` starts it: flags, listener, auth, the check
// input end to end, and a clean shutdown. The desk's behaviour is tested
// in package desk.
func TestServe_EndToEnd(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--addr", "127.0.0.1:0", "--api-key", "test-key", "--workspace-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(a net.Addr) { addrs <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	c := &desktest.Client{T: t, Base: "http://" + addr.String(), Key: "test-key"}

	anon := &desktest.Client{T: t, Base: c.Base}
	if resp, b := anon.Do("GET", "/capabilities", "", nil); resp.StatusCode != 401 {
		t.Errorf("capabilities without a key = %d %s", resp.StatusCode, b)
	}
	var caps harnesskit.Capabilities
	c.Get("/capabilities", &caps)
	if caps.Agent != desk.Agent || caps.Accepts.ModelOverride || caps.Limits == nil || caps.Limits.MaxConcurrentRuns == nil || *caps.Limits.MaxConcurrentRuns != 4 {
		t.Errorf("capabilities = %s", c.Get("/capabilities", nil))
	}
	st := c.Finish(c.Start(`{"input":` + string(caps.CheckInput) + `}`))
	if st.Status != harnesskit.StatusCompleted || st.Model != desk.RulesModel || st.Answer == nil || !strings.Contains(*st.Answer, "59.90 USD") {
		t.Fatalf("status = %+v", st)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel = %v", err)
	}
}

// With OPENAI_* set the command serves the desk on a model.
func TestNewServer_Model(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.workspaceDir = t.TempDir()
	h, err := newServer(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	caps := h.Capabilities()
	if !caps.Accepts.ModelOverride || !caps.Provides.TokenUsage {
		t.Errorf("capabilities with a model: accepts %+v provides %+v", caps.Accepts, caps.Provides)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OPENAI_BASE_URL": "http://llm:8000/v1", "OPENAI_MODEL": "qwen", "HARNESS_API_KEY": "from-env"}
	getenv := func(k string) string { return env[k] }
	c, err := parseConfig(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:8080" || c.apiKey != "from-env" || c.model != "qwen" || !c.usesModel() || c.maxConcurrentRuns != 4 {
		t.Errorf("config = %+v", c)
	}
	c, err = parseConfig([]string{"--addr", ":9000", "--api-key", "flag", "--model", "m2", "--max-concurrent-runs", "8"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != ":9000" || c.apiKey != "flag" || c.model != "m2" || c.usesModel() || c.maxConcurrentRuns != 8 {
		t.Errorf("config = %+v", c)
	}
	for _, args := range [][]string{{"--max-concurrent-runs", "0"}, {"extra"}, {"--nope"}} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) succeeded", args)
		}
	}
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h = %v", err)
	}
}
