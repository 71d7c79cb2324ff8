package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// TestAdminScripts runs the admin command scripts in testdata/admin
// against a real gyre server in this process ($SERVER), on SQLite, with
// the upstream "stub" configured, an admin key in $WORK/admin.key, a
// reader key in $READER_KEY, agent "bot-1" seen (one turn) whose
// promoted policy went base-v1 → cand-v1 (the second by promotion
// 0192f0c4-0000-7000-8000-0000000000aa), and agent "shop-bot" with the
// turns of insertShopTurns. They have the commands of TestScripts.
func TestAdminScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/admin",
		RequireExplicitExec: true,
		Setup:               setupAdminServer,
		Cmds:                scriptCmds,
	})
}

func setupAdminServer(env *testscript.Env) error {
	ctx := context.Background()
	dir := filepath.Join(env.WorkDir, "server")
	log := slog.New(slog.DiscardHandler)
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Migrate: true})
	if err != nil {
		return err
	}
	env.Defer(func() { st.Close() })
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		return err
	}
	env.Defer(func() { blobs.Close() })
	gw, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{Name: "stub", BaseURL: "http://127.0.0.1:1/v1", AllowPrivate: true}}},
		gateway.Deps{Store: st, Blobs: blobs, Clock: clock.Real{}, Logger: log})
	if err != nil {
		return err
	}
	rollouts, err := rollout.New(rollout.Config{PublicURL: "http://127.0.0.1:1"}, rollout.Deps{Store: st, Clock: clock.Real{}, Logger: log,
		Grader: rollout.NewGrader(st, rollout.GraderDeps{Logger: log})})
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{}, api.Deps{Store: st, Logger: log, Clock: clock.Real{}, Blobs: blobs, Gateway: gw, Rollouts: rollouts})
	if err != nil {
		return err
	}
	ts := httptest.NewServer(srv.Handler())
	env.Defer(ts.Close)

	tn, err := st.CreateTenant(ctx, "acme")
	if err != nil {
		return err
	}
	_, admin, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	if err != nil {
		return err
	}
	_, reader, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleReader})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(env.WorkDir, "admin.key"), []byte(admin+"\n"), 0o600); err != nil {
		return err
	}
	turn, _ := json.Marshal(map[string]any{"schema": "flywheel/1", "agent_id": "bot-1", "turn_id": "t1",
		"input_text": "hi", "final_text": "ok", "tool_calls": nil, "tool_calls_omitted_count": 0})
	sum, err := jcs.Hash(turn)
	if err != nil {
		return err
	}
	if _, err := st.InsertTurns(ctx, tn.ID, "bot-1", []store.NewTurn{{TurnID: "t1", Body: turn, SHA256: sum}}); err != nil {
		return err
	}
	if err := insertShopTurns(ctx, st, tn.ID); err != nil {
		return err
	}
	for _, p := range []string{"base-v1", "cand-v1"} {
		body := json.RawMessage(`{"model":"m-` + p + `","name":"` + p + `","upstream":"stub"}`)
		if _, _, err := st.CreatePolicy(ctx, store.Policy{TenantID: tn.ID, Name: p, Body: body, SHA256: p}); err != nil {
			return err
		}
	}
	promo := "0192f0c4-0000-7000-8000-0000000000aa"
	base := "base-v1"
	for _, c := range []promotion.Change{
		{TenantID: tn.ID, AgentID: "bot-1", Policy: "base-v1", SetBy: "key setup"},
		{TenantID: tn.ID, AgentID: "bot-1", Expected: &base, Policy: "cand-v1", SetBy: promotion.ByPromotion(promo), PromotionID: &promo},
	} {
		if _, err := st.SetPromotedPolicy(ctx, c); err != nil {
			return err
		}
	}
	env.Setenv("SERVER", ts.URL)
	env.Setenv("READER_KEY", reader)
	return nil
}

// insertShopTurns stores agent shop-bot's turns: s1 and s3 in
// conversation c-a, s2 in c-b with input_text null, s4 in c-b.
func insertShopTurns(ctx context.Context, st store.Store, tenantID string) error {
	var turns []store.NewTurn
	for _, t := range []struct {
		id, conv string
		input    any
	}{{"s1", "c-a", "Where is order 1042?"}, {"s2", "c-b", nil}, {"s3", "c-a", "Refund order 1043, please"}, {"s4", "c-b", "Cancel my subscription"}} {
		body, _ := json.Marshal(map[string]any{"turn_id": t.id, "conversation_id": t.conv, "input_text": t.input,
			"final_text": "done", "tool_calls": nil, "tool_calls_omitted_count": 0})
		sum, err := jcs.Hash(body)
		if err != nil {
			return err
		}
		turns = append(turns, store.NewTurn{TurnID: t.id, ConversationID: t.conv, Body: body, SHA256: sum})
	}
	_, err := st.InsertTurns(ctx, tenantID, "shop-bot", turns)
	return err
}
