// Package seed fills a store and its blob store with training-grade
// rollouts for the dataset export benchmark: each rollout is claimed,
// submitted and graded through the store, with two counted gateway calls
// whose bodies are stored the way the gateway's recorder stores them
// (message blobs, a request document and a response), so a dataset of the
// agent selects and exports every one.
package seed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Blobs is what seeding needs of the blob store.
type Blobs interface {
	PutContent(ctx context.Context, prefix string, r io.Reader) (sha string, size int64, err error)
}

// Agent is the agent the seeded rollouts belong to.
const Agent = "bench-agent"

// Rollouts seeds n training-grade rollouts of agent Agent for tenantID,
// over 100 tasks in groups of two, 64 claimed at a time with their
// gateway records written in one flush, and returns how many it seeded.
func Rollouts(ctx context.Context, st store.Store, blobs Blobs, tenantID string, n int) (int, error) {
	const tasks = 100
	var doc bytes.Buffer
	doc.WriteString(`{"name":"bench","version":"1","cases":[`)
	for i := range tasks {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":"c%d","input":{"question":"q%d"}}`, i, i)
	}
	doc.WriteString(`]}`)
	sum := sha256.Sum256(doc.Bytes())
	sv, _, err := st.PutSuiteVersion(ctx, store.NewSuiteVersion{TenantID: tenantID, Name: "bench", Version: "1",
		ContentSHA256: hex.EncodeToString(sum[:]), Document: doc.Bytes(), Cases: tasks})
	if err != nil {
		return 0, fmt.Errorf("suite: %w", err)
	}
	req := store.SuiteTasks{TenantID: tenantID, SuiteName: sv.Name, SuiteVersion: sv.Version}
	for i := range tasks {
		req.Tasks = append(req.Tasks, store.NewTask{CaseID: fmt.Sprintf("c%d", i),
			Input: json.RawMessage(fmt.Sprintf(`{"question":"q%d"}`, i)), TurnInput: fmt.Sprintf("q%d", i),
			Graders: json.RawMessage(`[{"contains":"refund"}]`)})
	}
	ts, err := st.CreateSuiteTasks(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("tasks: %w", err)
	}
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	base := "gateway/" + tenantID
	// The shared system message is one blob, as the recorder stores it.
	system := []byte(`{"role":"system","content":"You are a support agent."}`)
	if err := put(ctx, blobs, base+"/messages", system); err != nil {
		return 0, err
	}
	done := 0
	for done < n {
		groups := min((n-done+1)/2, len(ids))
		if _, _, _, err := st.CreateBatch(ctx, store.NewBatch{TenantID: tenantID, AgentID: Agent, TaskIDs: ids[:groups],
			GroupSize: 2, DeadlineS: 3600, MaxAttempts: 1, RetryOn: gyre.DefaultRetryOn}); err != nil {
			return done, fmt.Errorf("batch: %w", err)
		}
		for {
			secrets := make([]store.RolloutSecrets, 64)
			for i := range secrets {
				seed := fmt.Sprintf("%s/%d/%d", tenantID, done, i)
				secrets[i] = store.RolloutSecrets{LeaseToken: sha256.Sum256([]byte(seed + "/lease")),
					GatewayToken: sha256.Sum256([]byte(seed + "/gw"))}
			}
			res, err := st.Claim(ctx, store.ClaimRequest{TenantID: tenantID, AgentID: Agent, Max: len(secrets),
				Lease: time.Hour, WorkerID: "seed", Secrets: secrets})
			if err != nil {
				return done, fmt.Errorf("claim: %w", err)
			}
			if len(res.Rollouts) == 0 {
				break
			}
			claimed := res.Rollouts[:min(len(res.Rollouts), n-done)]
			flush := store.GatewayFlush{ReplicaID: "seed"}
			for _, c := range claimed {
				recs, err := calls(ctx, blobs, base, tenantID, c.Rollout.ID, system)
				if err != nil {
					return done, err
				}
				flush.Records = append(flush.Records, recs...)
			}
			if err := st.RecordGateway(ctx, flush); err != nil {
				return done, fmt.Errorf("record gateway: %w", err)
			}
			for i, c := range claimed {
				out := `{"final_text":"Refund issued"}`
				osum := sha256.Sum256([]byte(out))
				if _, err := st.SubmitOutput(ctx, store.OutputSubmission{TenantID: tenantID, RolloutID: c.Rollout.ID,
					LeaseToken: secrets[i].LeaseToken, Output: json.RawMessage(out), OutputHash: hex.EncodeToString(osum[:]),
					Grace: 30 * time.Second}); err != nil {
					return done, fmt.Errorf("submit: %w", err)
				}
				reward, rec := 1.0, "on_policy"
				if err := st.SaveGrade(ctx, store.GradeResult{RolloutID: c.Rollout.ID,
					Verdicts:       json.RawMessage(`[{"grader":"contains","pass":true,"score":1,"reason":""}]`),
					GraderVersions: json.RawMessage(`[{"name":"contains"}]`),
					Outcome:        "passed", Reward: &reward, Reconciliation: &rec, TrainingGrade: true, Reasons: []string{}}); err != nil {
					return done, fmt.Errorf("grade: %w", err)
				}
				done++
			}
			if done >= n {
				break
			}
		}
	}
	return done, nil
}

// calls stores the bodies of a rollout's two counted completions and
// returns their records.
func calls(ctx context.Context, blobs Blobs, base, tenantID, rolloutID string, system []byte) ([]store.GatewayRecord, error) {
	user := []byte(fmt.Sprintf(`{"role":"user","content":"Refund order %s"}`, rolloutID))
	asst := []byte(`{"role":"assistant","content":"Which order?"}`)
	user2 := []byte(`{"role":"user","content":"The last one."}`)
	convs := [][][]byte{{system, user}, {system, user, asst, user2}}
	answers := []string{"Which order?", "Refund issued for " + rolloutID}
	now := time.Now()
	var out []store.GatewayRecord
	for i, msgs := range convs {
		doc := map[string]any{"format": "gyre.gateway-request/1", "head": `{"model":"bench-model","messages":`,
			"tail": `}`, "agent": map[string]any{}, "added": []string{}}
		shas := make([]string, len(msgs))
		for j, m := range msgs {
			s := sha256.Sum256(m)
			shas[j] = hex.EncodeToString(s[:])
			if j > 0 || i > 0 { // the system message is already stored
				if err := put(ctx, blobs, base+"/messages", m); err != nil {
					return nil, err
				}
			}
		}
		doc["messages"] = shas
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		rk, err := putKey(ctx, blobs, base+"/requests", b)
		if err != nil {
			return nil, err
		}
		resp := []byte(fmt.Sprintf(`{"id":"c%d","object":"chat.completion","model":"bench-model","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`, i, answers[i]))
		pk, err := putKey(ctx, blobs, base+"/responses", resp)
		if err != nil {
			return nil, err
		}
		id := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", rolloutID, i)))
		rid, model := rolloutID, "bench-model"
		done := now
		out = append(out, store.GatewayRecord{ID: hex.EncodeToString(id[:16]), TenantID: tenantID, AgentID: Agent,
			RolloutID: &rid, ReplicaID: "seed", Model: &model, RequestedModel: &model, Status: 200, Counted: true,
			ReceivedAt: now, Arrival: uint64(i), DoneAt: &done, RequestBlob: &rk, ResponseBlob: &pk,
			Usage: json.RawMessage(`{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}`)})
	}
	return out, nil
}

func put(ctx context.Context, blobs Blobs, prefix string, b []byte) error {
	_, err := putKey(ctx, blobs, prefix, b)
	return err
}

func putKey(ctx context.Context, blobs Blobs, prefix string, b []byte) (string, error) {
	sha, _, err := blobs.PutContent(ctx, prefix, bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("store blob: %w", err)
	}
	return prefix + "/" + sha, nil
}
