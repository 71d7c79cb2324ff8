// Package seed fills a store and its blob store with training-grade
// rollouts for the dataset export benchmark: each rollout is claimed,
// submitted and graded through the store, with two counted gateway calls
// whose bodies are stored the way the gateway's recorder stores them
// (message blobs, a request document and a response), so a dataset of the
// agent selects and exports every one.
//
// Seeding is quick enough to fill a store with 100,000 rollouts in
// minutes: the blobs every rollout shares (the system prompt, the
// recurring turns, the identical first answer) are stored once, as
// content addressing stores them once anyway; a chunk's own blobs are
// stored a few at a time; and its rollouts are submitted and graded at
// once, so the store's group commit writes them in a few transactions
// instead of two each. The rows are written through the same store
// methods as the API's, so they have the shape the API gives them.
package seed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
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
// over 100 tasks in groups of two, up to chunk claimed at a time with their
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
	sh, err := storeShared(ctx, blobs, base)
	if err != nil {
		return 0, err
	}
	done := 0
	for done < n {
		groups := min((n-done+1)/2, len(ids))
		if _, _, _, err := st.CreateBatch(ctx, store.NewBatch{TenantID: tenantID, AgentID: Agent, TaskIDs: ids[:groups],
			GroupSize: 2, DeadlineS: 3600, MaxAttempts: 1, RetryOn: gyre.DefaultRetryOn}); err != nil {
			return done, fmt.Errorf("batch: %w", err)
		}
		k, err := claimAndFinish(ctx, st, blobs, tenantID, base, sh, "", done, n-done)
		done += k
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Queued claims up to n of agent Agent's queued rollouts in tenantID —
// those of batches created otherwise, such as a promotion's two — and
// finishes each as Rollouts does its own (two counted completions with
// bodies, output, a passing verdict, training grade). It returns how many
// it finished.
func Queued(ctx context.Context, st store.Store, blobs Blobs, tenantID string, n int) (int, error) {
	base := "gateway/" + tenantID
	sh, err := storeShared(ctx, blobs, base)
	if err != nil {
		return 0, err
	}
	return claimAndFinish(ctx, st, blobs, tenantID, base, sh, "queued/", 0, n)
}

// claimAndFinish claims the agent's queued rollouts a chunk at a time,
// records their gateway calls and finishes them, until none is left or
// limit are done, and returns how many it finished. Each rollout's secrets
// derive from label and its number, from, counting from first.
func claimAndFinish(ctx context.Context, st store.Store, blobs Blobs, tenantID, base string, sh shared, label string, first, limit int) (int, error) {
	done := 0
	for done < limit {
		secrets := make([]store.RolloutSecrets, chunk)
		for i := range secrets {
			seed := fmt.Sprintf("%s/%s%d/%d", tenantID, label, first+done, i)
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
		claimed := res.Rollouts[:min(len(res.Rollouts), limit-done)]
		recs := make([][]store.GatewayRecord, len(claimed))
		if err := each(len(claimed), blobWriters, func(i int) error {
			var err error
			recs[i], err = calls(ctx, blobs, base, tenantID, claimed[i].Rollout.ID, sh)
			return err
		}); err != nil {
			return done, err
		}
		flush := store.GatewayFlush{ReplicaID: "seed"}
		for _, r := range recs {
			flush.Records = append(flush.Records, r...)
		}
		if err := st.RecordGateway(ctx, flush); err != nil {
			return done, fmt.Errorf("record gateway: %w", err)
		}
		// All at once, so that the store's group commit writes the
		// chunk in a few transactions.
		if err := each(len(claimed), len(claimed), func(i int) error {
			return finish(ctx, st, tenantID, claimed[i].Rollout.ID, secrets[i].LeaseToken)
		}); err != nil {
			return done, err
		}
		done += len(claimed)
	}
	return done, nil
}

// chunk is how many rollouts are claimed, recorded and graded together.
const chunk = 200

// blobWriters is how many of a chunk's rollouts store their blobs at once:
// a few, so that one's file system calls overlap another's work.
const blobWriters = 4

// finish submits a rollout's output and grades it passed and training
// grade, as the grader would.
func finish(ctx context.Context, st store.Store, tenantID, rolloutID string, lease [32]byte) error {
	out := `{"final_text":"Refund issued"}`
	osum := sha256.Sum256([]byte(out))
	if _, err := st.SubmitOutput(ctx, store.OutputSubmission{TenantID: tenantID, RolloutID: rolloutID,
		LeaseToken: lease, Output: json.RawMessage(out), OutputHash: hex.EncodeToString(osum[:]),
		Grace: 30 * time.Second}); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	reward, rec := 1.0, "on_policy"
	if err := st.SaveGrade(ctx, store.GradeResult{RolloutID: rolloutID,
		Verdicts:       json.RawMessage(`[{"grader":"contains","pass":true,"score":1,"reason":""}]`),
		GraderVersions: json.RawMessage(`[{"name":"contains"}]`),
		Outcome:        "passed", Reward: &reward, Reconciliation: &rec, TrainingGrade: true, Reasons: []string{}}); err != nil {
		return fmt.Errorf("grade: %w", err)
	}
	return nil
}

// The bodies every rollout's conversation shares: the system prompt, the
// assistant's question and the user's answer to it (a recurring turn, as
// in real traffic), and the first completion's response.
var (
	systemMsg = []byte(`{"role":"system","content":"You are a support agent."}`)
	askMsg    = []byte(`{"role":"assistant","content":"Which order?"}`)
	replyMsg  = []byte(`{"role":"user","content":"The last one."}`)
)

// answers are the two completions' answers; the first is every rollout's.
var answers = []string{"Which order?", "Refund issued for %s"}

func response(i int, rolloutID string) []byte {
	answer := answers[i]
	if i > 0 {
		answer = fmt.Sprintf(answer, rolloutID)
	}
	return []byte(fmt.Sprintf(`{"id":"c%d","object":"chat.completion","model":"bench-model","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`, i, answer))
}

// shared holds what storeShared stored: the shared messages' digests and
// the key of the shared first response.
type shared struct {
	messages  map[string]bool
	response0 string
}

// storeShared stores the blobs every rollout shares, once.
func storeShared(ctx context.Context, blobs Blobs, base string) (shared, error) {
	sh := shared{messages: map[string]bool{}}
	for _, m := range [][]byte{systemMsg, askMsg, replyMsg} {
		if err := put(ctx, blobs, base+"/messages", m); err != nil {
			return sh, err
		}
		sh.messages[digest(m)] = true
	}
	var err error
	sh.response0, err = putKey(ctx, blobs, base+"/responses", response(0, ""))
	return sh, err
}

// calls stores the bodies of a rollout's two counted completions that
// are its own (the shared ones are stored already) and returns their
// records.
func calls(ctx context.Context, blobs Blobs, base, tenantID, rolloutID string, sh shared) ([]store.GatewayRecord, error) {
	user := []byte(fmt.Sprintf(`{"role":"user","content":"Refund order %s"}`, rolloutID))
	convs := [][][]byte{{systemMsg, user}, {systemMsg, user, askMsg, replyMsg}}
	now := time.Now()
	var out []store.GatewayRecord
	for i, msgs := range convs {
		doc := map[string]any{"format": "gyre.gateway-request/1", "head": `{"model":"bench-model","messages":`,
			"tail": `}`, "agent": map[string]any{}, "added": []string{}}
		shas := make([]string, len(msgs))
		for j, m := range msgs {
			shas[j] = digest(m)
			if !sh.messages[shas[j]] && (i == 0 || j > 1) { // the user message goes once
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
		pk := sh.response0
		if i > 0 {
			if pk, err = putKey(ctx, blobs, base+"/responses", response(i, rolloutID)); err != nil {
				return nil, err
			}
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

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// each runs fn(i) for every i below n, at most limit at once, and returns
// the first error.
func each(n, limit int, fn func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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
