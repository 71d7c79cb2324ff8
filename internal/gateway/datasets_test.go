package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
)

// datasetView is GET /api/v1/datasets/{id}.
type datasetView struct {
	ID               string          `json:"id"`
	State            string          `json:"state"`
	Reason           *string         `json:"reason"`
	RolloutsSelected int             `json:"rollouts_selected"`
	FileSHA256       *string         `json:"file_sha256"`
	Manifest         json.RawMessage `json:"manifest"`
}

// createDataset posts a dataset and runs the build job until it is built.
func (h *harness) createDataset(b *build.Builder, body string) datasetView {
	h.t.Helper()
	r := h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin, body, http.StatusCreated)
	var d datasetView
	if err := json.Unmarshal(r.body, &d); err != nil {
		h.t.Fatal(err)
	}
	for range 10 {
		if d.State != "building" {
			return d
		}
		if _, err := b.RunOnce(context.Background(), "builder", time.Minute); err != nil {
			h.t.Fatal(err)
		}
		r = h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK)
		if err := json.Unmarshal(r.body, &d); err != nil {
			h.t.Fatal(err)
		}
	}
	h.t.Fatalf("dataset %s never built", d.ID)
	return d
}

// claimNext claims the agent's next queued rollout.
func (h *harness) claimNext() flywheel.RolloutRequest {
	h.t.Helper()
	c := h.mustJSON(http.MethodPost, "/agents/agent-1/claim", h.agent, "", http.StatusOK)
	var claim flywheel.ClaimResponse
	if err := json.Unmarshal(c.body, &claim); err != nil || len(claim.Rollouts) != 1 {
		h.t.Fatalf("claim: %s (%v)", c.body, err)
	}
	return claim.Rollouts[0]
}

func lines(b []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		out = append(out, slices.Clone(sc.Bytes()))
	}
	return out
}

// A dataset built from rollouts driven through the real API and gateway
// by the openai-go client holds exactly the expected rows, in order, in
// each format; sft and dpo rows pass OpenAI's format checks and atif
// documents gyre's validator. The file never changes afterwards: new
// rollouts, a regrade and a restarted server (a new server on the same
// store and blobs) serve the same bytes under the same strong ETag.
func TestDatasets_ExportExactRowsAndStayByteIdentical(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{s3OnPostgres: true})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			switch {
			case bytes.Contains(body, []byte(`"role":"tool"`)):
				streamText(w, body, []string{"refund ", "issued"}, false)
			case bytes.Contains(body, []byte(`"tools"`)):
				answerToolCall(w, "call_1", "lookup_order", `{"order": 7}`)
			default:
				answerText(w, body, "sorry, no")
			}
		})
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "lookup_order",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"order": map[string]any{"type": "integer"}}},
		})}
		prefix := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse. ✓"), openai.UserMessage("refund order 7")}
		ctx := context.Background()

		// Rollout A solves the task with a tool call (reward 1); B, in
		// the same group, answers at once and fails (reward 0).
		a := h.rollout(`,"policy":"p1","group_size":2`)
		cl := h.client(a)
		first, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: prefix, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		msgs := append(slices.Clone(prefix), first.Choices[0].Message.ToParam(), openai.ToolMessage(`{"status":"shipped"}`, "call_1"))
		stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs, Tools: tools})
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		h.submit(a, `{"final_text":"refund issued","llm_call_count":2,"agent_fingerprint":{"name":"refund-bot","version":"1.2"},
			"reward":0,"success":false,
			"tool_calls":[{"name":"lookup_order","outcome":"ok","status_code":200,"tool_call_id":"call_1","output":{"status":"shipped"}}]}`)
		b := h.claimNext()
		if _, err := h.client(b).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: prefix}); err != nil {
			t.Fatal(err)
		}
		h.submit(b, `{"final_text":"sorry, no","llm_call_count":1,"tool_calls":[],"reward":1,"success":true}`)
		// C does not report its tool calls: not training grade.
		c := h.rollout(`,"policy":"p1"`)
		if _, err := h.client(c).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: prefix}); err != nil {
			t.Fatal(err)
		}
		h.submit(c, `{"final_text":"refund","llm_call_count":1}`)
		for _, id := range []string{a.RolloutID, b.RolloutID, c.RolloutID} {
			h.settle(id)
		}
		ids := []string{a.RolloutID, b.RolloutID}
		slices.Sort(ids)

		builder := build.New(h.st, h.blobs, nil)
		type built struct {
			d    datasetView
			file []byte
			etag string
		}
		fetch := func(base, id string) ([]byte, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/datasets/"+id+"/file", nil)
			req.Header.Set("Authorization", "Bearer "+h.admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET file: %d %v %s", resp.StatusCode, err, buf.Bytes())
			}
			return buf.Bytes(), resp.Header.Get("ETag")
		}
		sets := map[dataset.Format]built{}
		for _, f := range dataset.Formats {
			d := h.createDataset(builder, fmt.Sprintf(`{"agent_id":"agent-1","format":%q}`, f))
			if d.State != "ready" || d.RolloutsSelected != 3 {
				t.Fatalf("%s: dataset %+v, want ready with 3 rollouts selected", f, d)
			}
			file, etag := fetch(h.ts.URL, d.ID)
			sum := sha256.Sum256(file)
			if etag != `"`+hex.EncodeToString(sum[:])+`"` || d.FileSHA256 == nil || *d.FileSHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("%s: ETag %s, file_sha256 %v, file hashes to %x", f, etag, d.FileSHA256, sum)
			}
			sets[f] = built{d, file, etag}
		}

		// sft: A's one chain (B is below min_reward 1, C not training grade).
		sft := lines(sets[dataset.FormatSFT].file)
		if len(sft) != 1 {
			t.Fatalf("sft: %d rows, want 1:\n%s", len(sft), sets[dataset.FormatSFT].file)
		}
		var sftRow struct {
			Messages []struct {
				Role       string          `json:"role"`
				Content    *string         `json:"content"`
				ToolCalls  json.RawMessage `json:"tool_calls"`
				ToolCallID string          `json:"tool_call_id"`
			} `json:"messages"`
			Tools json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(sft[0], &sftRow); err != nil {
			t.Fatal(err)
		}
		var roles []string
		for _, m := range sftRow.Messages {
			roles = append(roles, m.Role)
		}
		if !slices.Equal(roles, []string{"system", "user", "assistant", "tool", "assistant"}) ||
			*sftRow.Messages[0].Content != "You are terse. ✓" || *sftRow.Messages[4].Content != "refund issued" ||
			sftRow.Messages[3].ToolCallID != "call_1" || len(sftRow.Tools) == 0 {
			t.Errorf("sft row is not A's conversation: %s", sft[0])
		}
		if err := dataset.ValidateChat(sft[0]); err != nil {
			t.Errorf("sft row fails OpenAI's format checks: %v", err)
		}

		// dpo: one pair, A preferred over B, diverging at the first
		// assistant turn after the shared system and user messages.
		dpo := lines(sets[dataset.FormatDPO].file)
		if len(dpo) != 1 {
			t.Fatalf("dpo: %d rows, want 1:\n%s", len(dpo), sets[dataset.FormatDPO].file)
		}
		var pair struct {
			Input struct {
				Messages []struct {
					Role string `json:"role"`
				} `json:"messages"`
			} `json:"input"`
			Preferred    []map[string]any `json:"preferred_output"`
			NonPreferred []map[string]any `json:"non_preferred_output"`
		}
		if err := json.Unmarshal(dpo[0], &pair); err != nil {
			t.Fatal(err)
		}
		if len(pair.Input.Messages) != 2 || len(pair.Preferred) != 1 || pair.Preferred[0]["tool_calls"] == nil ||
			len(pair.NonPreferred) != 1 || pair.NonPreferred[0]["content"] != "sorry, no" {
			t.Errorf("dpo row is not A over B at turn 3: %s", dpo[0])
		}
		if err := dataset.ValidatePreference(dpo[0]); err != nil {
			t.Errorf("dpo row fails OpenAI's preference format checks: %v", err)
		}

		// rl: A then B (rollout id order), rewards from the server's
		// verdicts (never the advisory ones the agents sent).
		rl := lines(sets[dataset.FormatRL].file)
		if len(rl) != 2 {
			t.Fatalf("rl: %d rows, want 2", len(rl))
		}
		for i, row := range rl {
			var r struct {
				RolloutID string  `json:"rollout_id"`
				Reward    float64 `json:"reward"`
				Turns     []any   `json:"turns"`
			}
			if err := json.Unmarshal(row, &r); err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{a.RolloutID: 1, b.RolloutID: 0}
			wantTurns := map[string]int{a.RolloutID: 2, b.RolloutID: 1}
			if r.RolloutID != ids[i] || r.Reward != want[r.RolloutID] || len(r.Turns) != wantTurns[r.RolloutID] {
				t.Errorf("rl row %d: rollout %s reward %v turns %d, want %s", i, r.RolloutID, r.Reward, len(r.Turns), ids[i])
			}
		}

		// atif: one valid document per training-grade rollout, in order.
		docs := lines(sets[dataset.FormatATIF].file)
		if len(docs) != 2 {
			t.Fatalf("atif: %d documents, want 2", len(docs))
		}
		for i, doc := range docs {
			if err := atif.Validate(doc); err != nil {
				t.Errorf("atif document %d fails gyre's validator: %v", i, err)
			}
			var d struct {
				SessionID string `json:"session_id"`
			}
			if json.Unmarshal(doc, &d); d.SessionID != ids[i] {
				t.Errorf("atif document %d is of %s, want %s", i, d.SessionID, ids[i])
			}
		}

		// The manifest counts what was left out.
		var m dataset.Manifest
		mr := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+sets[dataset.FormatSFT].d.ID+"/manifest", h.admin, "", http.StatusOK)
		if err := json.Unmarshal(mr.body, &m); err != nil {
			t.Fatal(err)
		}
		if m.Rows != 1 || m.RolloutsSelected != 3 || m.RolloutsExported != 1 || m.NotExportedByReason["below_min_reward"] != 1 ||
			m.NotExportedByReason["tool_calls_not_reported"] != 1 || m.FileSHA256 != *sets[dataset.FormatSFT].d.FileSHA256 {
			t.Errorf("sft manifest = %s", mr.body)
		}

		// A second dataset of each format, frozen now but built only
		// after the changes below, as by a replica that takes the job up
		// after a restart.
		later := map[dataset.Format]string{}
		for _, f := range dataset.Formats {
			r := h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin, fmt.Sprintf(`{"agent_id":"agent-1","format":%q}`, f), http.StatusCreated)
			var d datasetView
			if err := json.Unmarshal(r.body, &d); err != nil || d.State != "building" {
				t.Fatalf("%s: %s", f, r.body)
			}
			later[f] = d.ID
		}

		// More rollouts, a regrade that flips both rewards, a restart:
		// every dataset serves the same bytes, and the datasets built
		// after them hold the same rows as those built before.
		d := h.rollout(`,"policy":"p1"`)
		if _, err := h.client(d).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: prefix}); err != nil {
			t.Fatal(err)
		}
		h.submit(d, `{"final_text":"refund","llm_call_count":1,"tool_calls":[]}`)
		h.settle(d.RolloutID)
		for _, id := range ids {
			h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+id+"/regrade", h.admin, `{"graders":[{"contains":"sorry"}]}`, http.StatusOK)
		}
		srv2, err := api.New(api.Config{}, api.Deps{Store: h.st, Blobs: h.blobs})
		if err != nil {
			t.Fatal(err)
		}
		ts2 := httptest.NewServer(srv2.Handler())
		defer ts2.Close()
		for f, s := range sets {
			file, etag := fetch(ts2.URL, s.d.ID)
			if !bytes.Equal(file, s.file) || etag != s.etag {
				t.Errorf("%s: after new rollouts, a regrade and a restart the file changed (ETag %s, was %s)", f, etag, s.etag)
			}
		}
		for range 20 {
			if _, err := build.New(h.st, h.blobs, nil).RunOnce(ctx, "restarted", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for f, id := range later {
			var d datasetView
			r := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+id, h.admin, "", http.StatusOK)
			if err := json.Unmarshal(r.body, &d); err != nil || d.State != "ready" || d.RolloutsSelected != 3 {
				t.Fatalf("%s built after the changes: %s", f, r.body)
			}
			file, etag := fetch(ts2.URL, id)
			if !bytes.Equal(file, sets[f].file) || etag != sets[f].etag {
				t.Errorf("%s: a dataset frozen before new rollouts and a regrade but built after them differs:\n%s\nwas\n%s", f, file, sets[f].file)
			}
		}
		// A new dataset sees the new rollout and the regrade.
		fresh := h.createDataset(builder, `{"agent_id":"agent-1","format":"rl"}`)
		if fresh.RolloutsSelected != 4 || *fresh.FileSHA256 == *sets[dataset.FormatRL].d.FileSHA256 {
			t.Errorf("a dataset created later: %+v", fresh)
		}
	})
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Pointer string `json:"pointer"`
	} `json:"error"`
}

func decodeError(t *testing.T, r response) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %s: %v", r.body, err)
	}
	return e
}

// The rules of a dataset's creation and build: bad input changes
// nothing; a selection of nothing is ready at once with a manifest that
// says why; the file and manifest are 409 while building; one replica
// builds (a job another holds is left alone until its lease lapses); a
// rollout whose blobs are gone is not exported, under bodies_missing,
// without failing the build; a build that cannot be done is failed with
// its reason, never ready.
func TestDatasets_CreationAndBuildRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	ctx := context.Background()
	a := h.rollout(`,"policy":"p1"`)
	if _, err := h.client(a).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refund order 7")}}); err != nil {
		t.Fatal(err)
	}
	h.submit(a, `{"final_text":"refund issued","llm_call_count":1,"tool_calls":[]}`)
	h.settle(a.RolloutID)

	for _, tc := range []struct {
		name, body string
		status     int
		code, ptr  string
	}{
		{"unknown format", `{"agent_id":"agent-1","format":"csv"}`, 422, "invalid_body", "/format"},
		{"no format", `{"agent_id":"agent-1"}`, 422, "invalid_body", "/format"},
		{"no agent", `{"format":"sft"}`, 422, "invalid_body", "/agent_id"},
		{"bad since", `{"agent_id":"agent-1","format":"sft","since":"yesterday"}`, 422, "invalid_body", "/since"},
		{"empty range", `{"agent_id":"agent-1","format":"sft","since":"2031-06-02T00:00:00Z","until":"2031-06-01T00:00:00Z"}`, 422, "invalid_body", "/until"},
		{"negative margin", `{"agent_id":"agent-1","format":"dpo","min_margin":-1}`, 422, "invalid_body", "/min_margin"},
		{"bad batch id", `{"agent_id":"agent-1","format":"sft","batch_ids":["x"]}`, 422, "invalid_body", "/batch_ids/0"},
		{"unknown member", `{"agent_id":"agent-1","format":"sft","reward":1}`, 422, "invalid_body", "/reward"},
		{"unknown agent", `{"agent_id":"agent-9","format":"sft"}`, 404, "not_found", ""},
	} {
		r := h.do(http.MethodPost, "/api/v1/datasets", h.admin, []byte(tc.body))
		e := decodeError(t, r)
		if r.status != tc.status || e.Error.Code != tc.code || e.Error.Pointer != tc.ptr {
			t.Errorf("%s: %d %s, want %d %s at %q", tc.name, r.status, r.body, tc.status, tc.code, tc.ptr)
		}
	}
	if r := h.mustJSON(http.MethodGet, "/api/v1/datasets", h.admin, "", http.StatusOK); !bytes.Contains(r.body, []byte(`"items":[]`)) {
		t.Fatalf("refused creations stored something: %s", r.body)
	}

	// A selection of nothing: ready at once, 0 rows, and why.
	r := h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin,
		`{"agent_id":"agent-1","format":"sft","batch_ids":["0192f0c4-0000-7000-8000-000000000001"]}`, http.StatusCreated)
	var empty datasetView
	if err := json.Unmarshal(r.body, &empty); err != nil {
		t.Fatal(err)
	}
	var em dataset.Manifest
	if err := json.Unmarshal(empty.Manifest, &em); empty.State != "ready" || err != nil || em.Rows != 0 ||
		em.EmptyReason == nil || *em.EmptyReason != "no rollout matched the selection" {
		t.Fatalf("empty selection: %s", r.body)
	}
	// Its queued job finds it built and leaves it as it is.
	builder := build.New(h.st, h.blobs, nil)
	if n, err := builder.RunOnce(ctx, "other", time.Minute); err != nil || n != 1 {
		t.Fatalf("the empty dataset's job: %d %v", n, err)
	}
	if r2 := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+empty.ID, h.admin, "", http.StatusOK); !bytes.Contains(r2.body, []byte(`"state":"ready"`)) {
		t.Fatalf("after its job: %s", r2.body)
	}

	// Building: the file and manifest are 409; a job another replica
	// holds is not built until its lease lapses.
	r = h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin, `{"agent_id":"agent-1","format":"rl"}`, http.StatusCreated)
	var d datasetView
	_ = json.Unmarshal(r.body, &d)
	if d.State != "building" {
		t.Fatalf("dataset with members: %s, want building", r.body)
	}
	for _, p := range []string{"/file", "/manifest"} {
		h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+p, h.admin, "", http.StatusConflict)
	}
	if jobs, err := h.st.ClaimJobs(ctx, "replica-that-dies", []string{"dataset_build"}, 1, time.Minute); err != nil || len(jobs) != 1 {
		t.Fatalf("claim the build: %v %v", jobs, err)
	}
	if n, err := builder.RunOnce(ctx, "other", time.Minute); err != nil || n != 0 {
		t.Fatalf("a second replica took a held build: %d %v", n, err)
	}
	h.clk.Advance(2 * time.Minute)
	if n, err := builder.RunOnce(ctx, "other", time.Minute); err != nil || n != 1 {
		t.Fatalf("the lapsed build was not taken over: %d %v", n, err)
	}
	r = h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK)
	_ = json.Unmarshal(r.body, &d)
	if d.State != "ready" {
		t.Fatalf("after the takeover: %s", r.body)
	}
	file := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+"/file", h.admin, "", http.StatusOK)
	if len(lines(file.body)) != 1 {
		t.Fatalf("rl file: %s", file.body)
	}
	// A conditional GET with the ETag is 304.
	h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+"/file", h.admin, "", http.StatusNotModified, "If-None-Match", file.header.Get("ETag"))

	// Blobs gone: not exported under bodies_missing; the build is ready.
	calls, err := h.st.GatewayCalls(ctx, h.tenant.ID, a.RolloutID)
	if err != nil || len(calls) != 1 || calls[0].ResponseBlob == nil {
		t.Fatalf("calls: %+v %v", calls, err)
	}
	if err := h.blobs.Delete(ctx, *calls[0].ResponseBlob); err != nil {
		t.Fatal(err)
	}
	missing := h.createDataset(builder, `{"agent_id":"agent-1","format":"rl"}`)
	var mm dataset.Manifest
	if err := json.Unmarshal(missing.Manifest, &mm); missing.State != "ready" || err != nil || mm.Rows != 0 ||
		mm.NotExportedByReason[build.ReasonBodiesMissing] != 1 {
		t.Fatalf("missing blobs: %+v %s", missing, missing.Manifest)
	}

	// No blob store: failed with the reason, never ready.
	noBlobs := build.New(h.st, nil, nil)
	r = h.mustJSON(http.MethodPost, "/api/v1/datasets", h.admin, `{"agent_id":"agent-1","format":"sft"}`, http.StatusCreated)
	var f datasetView
	_ = json.Unmarshal(r.body, &f)
	if _, err := noBlobs.RunOnce(ctx, "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	r = h.mustJSON(http.MethodGet, "/api/v1/datasets/"+f.ID, h.admin, "", http.StatusOK)
	_ = json.Unmarshal(r.body, &f)
	if f.State != "failed" || f.Reason == nil || f.FileSHA256 != nil || string(f.Manifest) != "null" {
		t.Fatalf("a build without a blob store: %s", r.body)
	}
	fr := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+f.ID+"/file", h.admin, "", http.StatusConflict)
	if e := decodeError(t, fr); !bytes.Contains([]byte(e.Error.Message), []byte("failed to build")) {
		t.Errorf("file of a failed dataset: %s", fr.body)
	}
}
