package storetest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// runRollouts runs the conformance tests of batches, rollouts, leases,
// outputs, the watchdog and the job queue.
func runRollouts(t *testing.T, open Opener) {
	t.Run("CreateBatch", func(t *testing.T) { t.Parallel(); testCreateBatch(t, open) })
	t.Run("BatchIdempotency", func(t *testing.T) { t.Parallel(); testBatchIdempotency(t, open) })
	t.Run("BatchRejects", func(t *testing.T) { t.Parallel(); testBatchRejects(t, open) })
	t.Run("ClaimOrder", func(t *testing.T) { t.Parallel(); testClaimOrder(t, open) })
	t.Run("ClaimLeaseAndDeadline", func(t *testing.T) { t.Parallel(); testClaimLeaseAndDeadline(t, open) })
	t.Run("ClaimExactlyOnce", func(t *testing.T) { t.Parallel(); testClaimExactlyOnce(t, open) })
	t.Run("ClaimIdempotency", func(t *testing.T) { t.Parallel(); testClaimIdempotency(t, open) })
	t.Run("ConcurrentSameKeyClaimsLeaseOnce", func(t *testing.T) { t.Parallel(); testConcurrentSameKeyClaimsLeaseOnce(t, open) })
	t.Run("Heartbeat", func(t *testing.T) { t.Parallel(); testHeartbeat(t, open) })
	t.Run("SubmitOutput", func(t *testing.T) { t.Parallel(); testSubmitOutput(t, open) })
	t.Run("OutputChecksOrder", func(t *testing.T) { t.Parallel(); testOutputChecksOrder(t, open) })
	t.Run("RetryOnExclusion", func(t *testing.T) { t.Parallel(); testRetryOnExclusion(t, open) })
	t.Run("SweepAbandonsAndRetries", func(t *testing.T) { t.Parallel(); testSweepAbandons(t, open) })
	t.Run("SweepDeadline", func(t *testing.T) { t.Parallel(); testSweepDeadline(t, open) })
	t.Run("Release", func(t *testing.T) { t.Parallel(); testRelease(t, open) })
	t.Run("Cancel", func(t *testing.T) { t.Parallel(); testCancel(t, open) })
	t.Run("GatewayGrant", func(t *testing.T) { t.Parallel(); testGatewayGrant(t, open) })
	t.Run("Jobs", func(t *testing.T) { t.Parallel(); testJobs(t, open) })
	t.Run("GradeAndReads", func(t *testing.T) { t.Parallel(); testGradeAndReads(t, open) })
	t.Run("RolloutIsolation", func(t *testing.T) { t.Parallel(); testRolloutIsolation(t, open) })
}

// rolloutFixture is a store with one tenant and n tasks.
type rolloutFixture struct {
	s      store.Store
	clk    *clock.Fake
	tenant gyre.Tenant
	tasks  []string
}

func newRolloutFixture(t *testing.T, open Opener, nTasks int) *rolloutFixture {
	t.Helper()
	clk := clock.NewFake(Start)
	s := open(t, clk)
	f := &rolloutFixture{s: s, clk: clk, tenant: mustTenant(t, s, "acme")}
	f.tasks = f.seedTasks(t, f.tenant.ID, "suite", nTasks)
	return f
}

func (f *rolloutFixture) seedTasks(t *testing.T, tenantID, suite string, n int) []string {
	t.Helper()
	sv, _ := mustPutSuite(t, f.s, newSuiteVersion(t, tenantID, suite, "", n))
	tasks, err := f.s.CreateSuiteTasks(t.Context(), suiteTasks(tenantID, sv, n))
	if err != nil {
		t.Fatalf("CreateSuiteTasks: %v", err)
	}
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = tk.ID
	}
	return ids
}

func (f *rolloutFixture) batch(t *testing.T, nb store.NewBatch) (store.Batch, []string) {
	t.Helper()
	if nb.TenantID == "" {
		nb.TenantID = f.tenant.ID
	}
	if nb.AgentID == "" {
		nb.AgentID = "agent-1"
	}
	if nb.TaskIDs == nil {
		nb.TaskIDs = f.tasks
	}
	if nb.GroupSize == 0 {
		nb.GroupSize = 1
	}
	if nb.DeadlineS == 0 {
		nb.DeadlineS = 600
	}
	if nb.MaxAttempts == 0 {
		nb.MaxAttempts = 2
	}
	if nb.RetryOn == nil {
		nb.RetryOn = gyre.DefaultRetryOn
	}
	b, ids, _, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	return b, ids
}

// secretsN returns n distinct secret sets derived from seed, and the
// lease tokens' preimages so tests can present them.
func secretsN(seed string, n int) []store.RolloutSecrets {
	out := make([]store.RolloutSecrets, n)
	for i := range out {
		out[i] = store.RolloutSecrets{
			LeaseToken:   sha256.Sum256([]byte(fmt.Sprintf("%s/lease/%d", seed, i))),
			GatewayToken: sha256.Sum256([]byte(fmt.Sprintf("%s/gw/%d", seed, i))),
			GatewayKey:   sha256.Sum256([]byte(fmt.Sprintf("%s/key/%d", seed, i))),
		}
	}
	return out
}

func (f *rolloutFixture) claim(t *testing.T, agent string, max int, lease time.Duration, seed string) store.ClaimResult {
	t.Helper()
	res, err := f.s.Claim(t.Context(), store.ClaimRequest{
		TenantID: f.tenant.ID, AgentID: agent, Max: max, Lease: lease, WorkerID: "w1", Secrets: secretsN(seed, max),
	})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res
}

// claimOne claims one rollout and returns it with its lease token hash.
func (f *rolloutFixture) claimOne(t *testing.T, seed string) (store.Rollout, [32]byte) {
	t.Helper()
	res := f.claim(t, "agent-1", 1, time.Minute, seed)
	if len(res.Rollouts) != 1 {
		t.Fatalf("claimed %d rollouts, want 1", len(res.Rollouts))
	}
	return res.Rollouts[0].Rollout, secretsN(seed, 1)[0].LeaseToken
}

func (f *rolloutFixture) submit(t *testing.T, r store.Rollout, tok [32]byte, output string, exclusion *string) (store.OutputResult, error) {
	t.Helper()
	return f.s.SubmitOutput(t.Context(), store.OutputSubmission{
		TenantID: f.tenant.ID, RolloutID: r.ID, LeaseToken: tok, Output: json.RawMessage(output),
		OutputHash: fmt.Sprintf("%x", sha256.Sum256([]byte(output))), Exclusion: exclusion, Grace: 30 * time.Second,
	})
}

func mustGet(t *testing.T, s store.Store, tenantID, id string) store.Rollout {
	t.Helper()
	r, err := s.GetRollout(t.Context(), tenantID, id)
	if err != nil {
		t.Fatalf("GetRollout(%s): %v", id, err)
	}
	return r
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func testCreateBatch(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	b, ids := f.batch(t, store.NewBatch{GroupSize: 2, DeadlineS: 90, MaxAttempts: 3, RetryOn: []string{"capacity"},
		Limits: json.RawMessage(`{"max_completions":5}`)})
	if len(ids) != 6 {
		t.Fatalf("CreateBatch minted %d rollouts, want 3 tasks × group 2 = 6", len(ids))
	}
	if b.GroupSize != 2 || b.DeadlineS != 90 || b.MaxAttempts != 3 || !slices.Equal(b.RetryOn, []string{"capacity"}) ||
		string(b.Limits) != `{"max_completions":5}` || !slices.Equal(b.TaskIDs, f.tasks) || !b.CreatedAt.Equal(Start.Truncate(time.Microsecond)) {
		t.Errorf("batch = %+v", b)
	}
	groups := map[string][]string{}
	for i, id := range ids {
		r := mustGet(t, f.s, f.tenant.ID, id)
		if r.State != gyre.StateQueued || r.Attempt != 1 || r.BatchID != b.ID || r.TaskID != f.tasks[i/2] {
			t.Errorf("rollout %d = %+v, want queued attempt 1 of task %d", i, r, i/2)
		}
		if r.TurnInput != fmt.Sprintf("q%d", i/2) {
			t.Errorf("rollout %d turn input = %q", i, r.TurnInput)
		}
		groups[r.GroupID] = append(groups[r.GroupID], r.TaskID)
	}
	if len(groups) != 3 {
		t.Fatalf("got %d groups, want one per task", len(groups))
	}
	for g, tasks := range groups {
		if len(tasks) != 2 || tasks[0] != tasks[1] {
			t.Errorf("group %s holds tasks %v, want one task twice", g, tasks)
		}
	}
	sum, err := f.s.BatchSummary(t.Context(), f.tenant.ID, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Counts[gyre.StateQueued] != 6 || sum.Groups != 3 || sum.GroupsComplete != 0 {
		t.Errorf("summary = %+v", sum)
	}
}

func testBatchIdempotency(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	nb := store.NewBatch{TenantID: f.tenant.ID, AgentID: "a", TaskIDs: f.tasks, GroupSize: 1, DeadlineS: 60, MaxAttempts: 1, IdempotencyKey: "k1"}
	b1, ids1, existed, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil || existed {
		t.Fatalf("first: existed=%v err=%v", existed, err)
	}
	f.clk.Advance(23 * time.Hour)
	b2, ids2, existed, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil || !existed || b2.ID != b1.ID || !slices.Equal(ids1, ids2) {
		t.Fatalf("same key within 24 h: batch %s existed=%v ids=%v err=%v, want the original %s %v", b2.ID, existed, ids2, err, b1.ID, ids1)
	}
	other := nb
	other.IdempotencyKey = "k2"
	if b3, _, existed, err := f.s.CreateBatch(t.Context(), other); err != nil || existed || b3.ID == b1.ID {
		t.Fatalf("another key made batch %s existed=%v err=%v", b3.ID, existed, err)
	}
	f.clk.Advance(2 * time.Hour)
	b4, _, existed, err := f.s.CreateBatch(t.Context(), nb)
	if err != nil || existed || b4.ID == b1.ID {
		t.Fatalf("same key after 24 h: existed=%v err=%v, want a new batch", existed, err)
	}
}

func testBatchRejects(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	other := mustTenant(t, f.s, "other")
	foreign := f.seedTasks(t, other.ID, "theirs", 1)
	policy := "missing"
	cases := []struct {
		name    string
		nb      store.NewBatch
		pointer string
		want    error
	}{
		{"unknown task", store.NewBatch{TaskIDs: []string{f.tasks[0], "0190b7a0-0000-7000-8000-000000000000"}}, "/task_ids/1", store.ErrNotFound},
		{"foreign task", store.NewBatch{TaskIDs: []string{foreign[0]}}, "/task_ids/0", store.ErrNotFound},
		{"unknown policy", store.NewBatch{Policy: &policy}, "/policy", store.ErrPolicyNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nb := c.nb
			nb.TenantID, nb.AgentID, nb.GroupSize, nb.DeadlineS, nb.MaxAttempts = f.tenant.ID, "a", 1, 60, 1
			if nb.TaskIDs == nil {
				nb.TaskIDs = f.tasks
			}
			_, _, _, err := f.s.CreateBatch(t.Context(), nb)
			var fe *store.FieldError
			if !errors.As(err, &fe) || fe.Pointer != c.pointer || !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want a FieldError at %s wrapping %v", err, c.pointer, c.want)
			}
		})
	}
	if rs, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{}, store.Page{}); err != nil || len(rs) != 0 {
		t.Fatalf("refused batches left %d rollouts (err %v)", len(rs), err)
	}
}

func testClaimOrder(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	_, first := f.batch(t, store.NewBatch{GroupSize: 2})
	f.clk.Advance(time.Second)
	_, second := f.batch(t, store.NewBatch{GroupSize: 2})
	var got []string
	for range 8 {
		res := f.claim(t, "agent-1", 1, time.Minute, fmt.Sprint(len(got)))
		got = append(got, res.Rollouts[0].Rollout.ID)
	}
	want := append(slices.Clone(first), second...)
	if !slices.Equal(got, want) {
		t.Fatalf("claim order = %v\nwant oldest batch first, task by task = %v", got, want)
	}
	if res := f.claim(t, "agent-1", 1, time.Minute, "x"); len(res.Rollouts) != 0 || res.MoreQueued {
		t.Fatalf("claim on an empty queue = %+v", res)
	}
	if res := f.claim(t, "agent-2", 1, time.Minute, "y"); len(res.Rollouts) != 0 {
		t.Fatalf("another agent claimed %v", res.Rollouts)
	}
}

func testClaimLeaseAndDeadline(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	f.batch(t, store.NewBatch{DeadlineS: 120.5})
	f.clk.Advance(10 * time.Second)
	res := f.claim(t, "agent-1", 2, 45*time.Second, "s")
	if len(res.Rollouts) != 2 || !res.MoreQueued {
		t.Fatalf("claimed %d, more=%v; want 2 with one left", len(res.Rollouts), res.MoreQueued)
	}
	now := f.clk.Now().Truncate(time.Microsecond)
	if !res.Now.Equal(now) {
		t.Errorf("claim Now = %v, want the store clock %v", res.Now, now)
	}
	for i, c := range res.Rollouts {
		r := c.Rollout
		if c.Secrets != i || r.State != gyre.StateLeased || r.LeaseGrant != 45*time.Second || *r.WorkerID != "w1" {
			t.Errorf("claimed %d = %+v", i, r)
		}
		if !r.LeaseExpiresAt.Equal(now.Add(45*time.Second)) || !r.Deadline.Equal(now.Add(120500*time.Millisecond)) || !r.ClaimedAt.Equal(now) {
			t.Errorf("claimed %d: expires %v deadline %v claimed %v, want claim time + grant / + deadline_s", i, r.LeaseExpiresAt, r.Deadline, r.ClaimedAt)
		}
	}
	res = f.claim(t, "agent-1", 5, time.Minute, "t")
	if len(res.Rollouts) != 1 || res.MoreQueued {
		t.Fatalf("second claim got %d more=%v, want the last one", len(res.Rollouts), res.MoreQueued)
	}
}

func testClaimExactlyOnce(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 50)
	_, ids := f.batch(t, store.NewBatch{GroupSize: 4})
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				res, err := f.s.Claim(t.Context(), store.ClaimRequest{TenantID: f.tenant.ID, AgentID: "agent-1", Max: 3,
					Lease: time.Minute, Secrets: secretsN(fmt.Sprintf("w%d-%d", w, i), 3)})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(res.Rollouts) == 0 {
					return
				}
				mu.Lock()
				for _, c := range res.Rollouts {
					got[c.Rollout.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != len(ids) {
		t.Fatalf("claimed %d distinct rollouts, want %d", len(got), len(ids))
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("rollout %s claimed %d times", id, n)
		}
	}
}

func testClaimIdempotency(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	f.batch(t, store.NewBatch{})
	req := store.ClaimRequest{TenantID: f.tenant.ID, AgentID: "agent-1", Max: 2, Lease: time.Minute, IdempotencyKey: "c1", Secrets: secretsN("a", 2)}
	first, err := f.s.Claim(t.Context(), req)
	if err != nil || len(first.Rollouts) != 2 {
		t.Fatalf("first claim: %v %v", first, err)
	}
	req.Secrets = secretsN("b", 2)
	f.clk.Advance(10 * time.Second)
	again, err := f.s.Claim(t.Context(), req)
	if err != nil || len(again.Rollouts) != 2 {
		t.Fatalf("retried claim: %v %v", again, err)
	}
	for i := range 2 {
		if again.Rollouts[i].Rollout.ID != first.Rollouts[i].Rollout.ID {
			t.Fatalf("retried claim returned %s, want the same rollout %s", again.Rollouts[i].Rollout.ID, first.Rollouts[i].Rollout.ID)
		}
	}
	id := first.Rollouts[0].Rollout.ID
	if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, id, secretsN("a", 1)[0].LeaseToken); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("the first claim's token after rotation: %v, want lease lost", err)
	}
	if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, id, secretsN("b", 1)[0].LeaseToken); err != nil {
		t.Errorf("the rotated token: %v", err)
	}
	// Once the leases lapse, the key no longer pins them: a claim leases afresh.
	f.clk.Advance(2 * time.Minute)
	req.Secrets = secretsN("c", 2)
	fresh, err := f.s.Claim(t.Context(), req)
	if err != nil || len(fresh.Rollouts) != 1 || fresh.Rollouts[0].Rollout.ID == id {
		t.Fatalf("claim after the leases lapsed = %+v %v, want the one queued rollout", fresh, err)
	}
}

// Concurrent claims sharing one Idempotency-Key lease once between them:
// every one answers the same rollouts and no other rollout leaves the
// queue, on every engine and with any number of connections (issue 11,
// defect 3: on PostgreSQL each leased its own, and all but the last
// answer's rollouts were orphaned until the watchdog abandoned them).
func testConcurrentSameKeyClaimsLeaseOnce(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 40)
	f.batch(t, store.NewBatch{})
	const claims, max = 16, 2
	results := make([]store.ClaimResult, claims)
	errs := make([]error, claims)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claims {
		wg.Go(func() {
			<-start
			results[i], errs[i] = f.s.Claim(t.Context(), store.ClaimRequest{
				TenantID: f.tenant.ID, AgentID: "agent-1", Max: max, Lease: time.Minute,
				IdempotencyKey: "same-key", Secrets: secretsN(fmt.Sprintf("c%d", i), max),
			})
		})
	}
	close(start)
	wg.Wait()
	var want []string
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		var got []string
		for _, c := range res.Rollouts {
			got = append(got, c.Rollout.ID)
		}
		if want == nil {
			want = got
		}
		if len(got) != max || !slices.Equal(got, want) {
			t.Errorf("claim %d answered %v, want the same %d rollouts as the others, %v", i, got, max, want)
		}
	}
	leased, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{State: gyre.StateLeased}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != max {
		t.Fatalf("%d rollouts are leased after %d claims sharing a key, want %d", len(leased), claims, max)
	}
}

func testHeartbeat(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 4)
	f.batch(t, store.NewBatch{MaxAttempts: 1})
	r, tok := f.claimOne(t, "h")
	f.clk.Advance(50 * time.Second)
	exp, err := f.s.Heartbeat(t.Context(), f.tenant.ID, r.ID, tok)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.clk.Now().Truncate(time.Microsecond).Add(time.Minute); !exp.Equal(want) {
		t.Errorf("renewed to %v, want now + the original grant %v", exp, want)
	}
	other := mustTenant(t, f.s, "other")
	wrong := sha256.Sum256([]byte("wrong"))
	cases := []struct {
		name   string
		tenant string
		id     string
		tok    [32]byte
		want   error
	}{
		{"unknown rollout", f.tenant.ID, "0190b7a0-0000-7000-8000-000000000000", tok, store.ErrNotFound},
		{"foreign tenant", other.ID, r.ID, tok, store.ErrNotFound},
		{"wrong token", f.tenant.ID, r.ID, wrong, store.ErrLeaseLost},
	}
	for _, c := range cases {
		_, err := f.s.Heartbeat(t.Context(), c.tenant, c.id, c.tok)
		wantErr(t, c.name, err, c.want)
	}
	// Lapsed, not yet swept: lease lost.
	f.clk.Advance(61 * time.Second)
	_, err = f.s.Heartbeat(t.Context(), f.tenant.ID, r.ID, tok)
	wantErr(t, "lapsed lease", err, store.ErrLeaseLost)
	// Swept (abandoned): still lease lost.
	if _, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.Heartbeat(t.Context(), f.tenant.ID, r.ID, tok)
	wantErr(t, "abandoned", err, store.ErrLeaseLost)
	// Submitted: finished.
	r2, tok2 := f.claimOne(t, "h2")
	if _, err := f.submit(t, r2, tok2, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.Heartbeat(t.Context(), f.tenant.ID, r2.ID, tok2)
	wantErr(t, "submitted", err, store.ErrRolloutFinished)
	// Cancelled: finished; the token is still checked first.
	r3, tok3 := f.claimOne(t, "h3")
	if _, err := f.s.CancelRollout(t.Context(), f.tenant.ID, r3.ID); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.Heartbeat(t.Context(), f.tenant.ID, r3.ID, tok3)
	wantErr(t, "cancelled", err, store.ErrRolloutFinished)
	_, err = f.s.Heartbeat(t.Context(), f.tenant.ID, r3.ID, wrong)
	wantErr(t, "cancelled, wrong token", err, store.ErrLeaseLost)
}

func testSubmitOutput(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "o")
	out := `{"final_text":"done","tool_calls":null,"tool_calls_omitted_count":0}`
	res, err := f.submit(t, r, tok, out, nil)
	if err != nil || res.Replayed || res.State != gyre.StateSubmitted || res.Retry != "" {
		t.Fatalf("submit = %+v, %v", res, err)
	}
	got := mustGet(t, f.s, f.tenant.ID, r.ID)
	if got.State != gyre.StateSubmitted || string(got.Output) != out || got.SubmittedAt == nil {
		t.Errorf("after submit: %+v", got)
	}
	// The same output again, even after the lease lapsed: replayed.
	f.clk.Advance(10 * time.Minute)
	res, err = f.submit(t, r, tok, out, nil)
	if err != nil || !res.Replayed || res.State != gyre.StateSubmitted {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	_, err = f.submit(t, r, tok, `{"final_text":"other"}`, nil)
	wantErr(t, "different output", err, store.ErrOutputConflict)
	// Grading was enqueued exactly once.
	jobs, err := f.s.ClaimJobs(t.Context(), "me", []string{store.JobGrade}, 10, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].SubjectID != r.ID {
		t.Fatalf("grade jobs = %+v, %v", jobs, err)
	}
	g, err := f.s.GatewayGrant(t.Context(), secretsN("o", 1)[0].GatewayToken)
	if err != nil || !g.Revoked {
		t.Errorf("gateway token after acceptance: %+v %v, want revoked", g, err)
	}
}

func testOutputChecksOrder(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 4)
	f.batch(t, store.NewBatch{DeadlineS: 100, MaxAttempts: 1})
	wrong := sha256.Sum256([]byte("wrong"))

	r, tok := f.claimOne(t, "a")
	_, err := f.submit(t, r, wrong, `{"final_text":"x"}`, nil)
	wantErr(t, "wrong token", err, store.ErrLeaseLost)
	_, err = f.s.SubmitOutput(t.Context(), store.OutputSubmission{TenantID: f.tenant.ID, RolloutID: "0190b7a0-0000-7000-8000-000000000000", LeaseToken: tok})
	wantErr(t, "unknown rollout", err, store.ErrNotFound)
	if err := f.s.CheckLease(t.Context(), f.tenant.ID, r.ID, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("CheckLease with a wrong token: %v", err)
	}
	if err := f.s.CheckLease(t.Context(), f.tenant.ID, r.ID, tok); err != nil {
		t.Errorf("CheckLease: %v", err)
	}

	// Lease lapsed (not swept) → lease lost.
	f.clk.Advance(61 * time.Second)
	_, err = f.submit(t, r, tok, `{"final_text":"x"}`, nil)
	wantErr(t, "lapsed lease", err, store.ErrLeaseLost)

	// Kept alive by heartbeats past the deadline but within grace → accepted.
	r2, tok2 := f.claimOne(t, "b")
	for range 4 {
		f.clk.Advance(30 * time.Second)
		if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, r2.ID, tok2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.submit(t, r2, tok2, `{"final_text":"late but in grace"}`, nil); err != nil {
		t.Fatalf("within grace: %v", err)
	}
	// Past deadline + grace → deadline exceeded.
	r3, tok3 := f.claimOne(t, "c")
	for range 5 {
		f.clk.Advance(29 * time.Second)
		if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, r3.ID, tok3); err != nil {
			t.Fatal(err)
		}
	}
	_, err = f.submit(t, r3, tok3, `{"final_text":"too late"}`, nil)
	wantErr(t, "past deadline + grace", err, store.ErrDeadlineExceeded)
	// Cancelled → lease lost.
	r4, tok4 := f.claimOne(t, "d")
	if _, err := f.s.CancelRollout(t.Context(), f.tenant.ID, r4.ID); err != nil {
		t.Fatal(err)
	}
	_, err = f.submit(t, r4, tok4, `{"final_text":"x"}`, nil)
	wantErr(t, "cancelled", err, store.ErrLeaseLost)
}

func testRetryOnExclusion(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{MaxAttempts: 2, RetryOn: []string{"capacity"}})
	r, tok := f.claimOne(t, "r1")
	capacity, deadline := "capacity", "deadline_exceeded"
	res, err := f.submit(t, r, tok, `{"final_text":"","exclusion":{"reason":"capacity"}}`, &capacity)
	if err != nil || res.Retry == "" {
		t.Fatalf("retryable exclusion: %+v %v, want a retry", res, err)
	}
	retry := mustGet(t, f.s, f.tenant.ID, res.Retry)
	if retry.Attempt != 2 || retry.GroupID != r.GroupID || retry.TaskID != r.TaskID || retry.State != gyre.StateQueued || retry.ID == r.ID {
		t.Fatalf("retry = %+v, want attempt 2 of the same task and group, a new id", retry)
	}
	// The retry is at its attempt limit: no further retry.
	r2, tok2 := f.claimOne(t, "r2")
	res, err = f.submit(t, r2, tok2, `{"final_text":"","exclusion":{"reason":"capacity"}}`, &capacity)
	if err != nil || res.Retry != "" {
		t.Fatalf("exclusion at max attempts: %+v %v, want no retry", res, err)
	}
	// deadline_exceeded and reasons outside retry_on are never retried.
	f2 := newRolloutFixture(t, open, 2)
	f2.batch(t, store.NewBatch{MaxAttempts: 5, RetryOn: []string{"capacity", "deadline_exceeded"}})
	for _, reason := range []*string{&deadline, ptr("agent_exit_nonzero")} {
		r, tok := f2.claimOne(t, *reason)
		res, err := f2.submit(t, r, tok, fmt.Sprintf(`{"final_text":"","exclusion":{"reason":%q}}`, *reason), reason)
		if err != nil || res.Retry != "" {
			t.Errorf("exclusion %s: %+v %v, want no retry", *reason, res, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func testSweepAbandons(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	f.batch(t, store.NewBatch{MaxAttempts: 2})
	r, _ := f.claimOne(t, "s1")
	f.clk.Advance(59 * time.Second)
	if res, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(res.Abandoned) != 0 {
		t.Fatalf("sweep before expiry: %+v %v", res, err)
	}
	f.clk.Advance(time.Second)
	res, err := f.s.Sweep(t.Context(), 30*time.Second, 100)
	if err != nil || !slices.Equal(res.Abandoned, []string{r.ID}) || len(res.Retries) != 1 {
		t.Fatalf("sweep at expiry: %+v %v", res, err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); got.State != gyre.StateAbandoned || got.EndedAt == nil {
		t.Errorf("abandoned rollout = %+v", got)
	}
	g, err := f.s.GatewayGrant(t.Context(), secretsN("s1", 1)[0].GatewayToken)
	if err != nil || !g.Revoked {
		t.Errorf("gateway token of an abandoned rollout: %+v %v, want revoked", g, err)
	}
	rq := res.Retries[0]
	retry := mustGet(t, f.s, f.tenant.ID, rq.RolloutID)
	if rq.TenantID != f.tenant.ID || rq.AgentID != "agent-1" || retry.Attempt != 2 || retry.GroupID != r.GroupID || retry.ID == r.ID {
		t.Fatalf("retry = %+v (%+v)", retry, rq)
	}
	// The retry keeps its task's place: it is claimed before the batch's second task.
	next, _ := f.claimOne(t, "s2")
	if next.ID != retry.ID {
		t.Fatalf("next claim = %s (task %s), want the retry %s at its task's place", next.ID, next.TaskID, retry.ID)
	}
	// At max attempts an abandoned rollout is not retried again.
	f.clk.Advance(2 * time.Minute)
	res, err = f.s.Sweep(t.Context(), 30*time.Second, 100)
	if err != nil || len(res.Abandoned) != 1 || len(res.Retries) != 0 {
		t.Fatalf("sweep of the last attempt: %+v %v", res, err)
	}
	// A second sweep finds nothing (and another replica's concurrent sweep
	// would have skipped the rows this one held).
	if res, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(res.Abandoned)+len(res.DeadlineExceeded) != 0 {
		t.Fatalf("second sweep: %+v %v", res, err)
	}
}

func testSweepDeadline(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{DeadlineS: 60, MaxAttempts: 3})
	r, tok := f.claimOne(t, "d")
	for range 3 { // to exactly deadline + grace: not yet past it
		f.clk.Advance(30 * time.Second)
		if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, r.ID, tok); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil || len(res.DeadlineExceeded) != 0 {
		t.Fatalf("sweep at exactly deadline + grace: %+v %v, want nothing ended", res, err)
	}
	for range 1 {
		f.clk.Advance(30 * time.Second)
		if _, err := f.s.Heartbeat(t.Context(), f.tenant.ID, r.ID, tok); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.s.Sweep(t.Context(), 30*time.Second, 100)
	if err != nil || !slices.Equal(res.DeadlineExceeded, []string{r.ID}) || len(res.Retries) != 0 {
		t.Fatalf("sweep past deadline + grace: %+v %v, want deadline_exceeded and no retry", res, err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); got.State != gyre.StateDeadlineExceeded {
		t.Errorf("state = %s", got.State)
	}
	_, err = f.submit(t, r, tok, `{"final_text":"x"}`, nil)
	wantErr(t, "output after deadline sweep", err, store.ErrDeadlineExceeded)
}

func testRelease(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{MaxAttempts: 1})
	r, tok := f.claimOne(t, "rel")
	next, err := f.s.Release(t.Context(), f.tenant.ID, r.ID, tok)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); got.State != gyre.StateReleased {
		t.Errorf("released rollout state = %s", got.State)
	}
	n := mustGet(t, f.s, f.tenant.ID, next)
	if n.Attempt != 1 || n.State != gyre.StateQueued || n.GroupID != r.GroupID || n.ID == r.ID {
		t.Fatalf("re-queued = %+v, want the same attempt, queued, same group, new id", n)
	}
	_, err = f.s.Release(t.Context(), f.tenant.ID, r.ID, tok)
	wantErr(t, "release twice", err, store.ErrRolloutFinished)
	_, err = f.s.Release(t.Context(), f.tenant.ID, next, tok)
	wantErr(t, "release of a queued rollout", err, store.ErrLeaseLost)
}

func testCancel(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 3)
	b, ids := f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "c")
	if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	leased, _ := f.claimOne(t, "c2")
	_, err := f.s.CancelRollout(t.Context(), f.tenant.ID, r.ID)
	wantErr(t, "cancel a submitted rollout", err, store.ErrRolloutFinished)
	n, err := f.s.CancelBatch(t.Context(), f.tenant.ID, b.ID)
	if err != nil || n != 2 {
		t.Fatalf("CancelBatch = %d, %v; want the leased and the queued one", n, err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, leased.ID); got.State != gyre.StateCancelled {
		t.Errorf("leased rollout after cancel = %s", got.State)
	}
	if got := mustGet(t, f.s, f.tenant.ID, ids[2]); got.State != gyre.StateCancelled {
		t.Errorf("queued rollout after cancel = %s", got.State)
	}
	if g, err := f.s.GatewayGrant(t.Context(), secretsN("c2", 1)[0].GatewayToken); err != nil || !g.Revoked {
		t.Errorf("cancelled rollout's gateway token: %+v %v", g, err)
	}
	if res := f.claim(t, "agent-1", 1, time.Minute, "z"); len(res.Rollouts) != 0 {
		t.Errorf("claimed from a cancelled batch: %v", res.Rollouts)
	}
	other := mustTenant(t, f.s, "other")
	if _, err := f.s.CancelBatch(t.Context(), other.ID, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CancelBatch from another tenant: %v", err)
	}
}

func testGatewayGrant(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	b, _ := f.batch(t, store.NewBatch{Limits: json.RawMessage(`{"max_completions":3}`)})
	r, _ := f.claimOne(t, "g")
	sec := secretsN("g", 1)[0]
	g, err := f.s.GatewayGrant(t.Context(), sec.GatewayToken)
	if err != nil {
		t.Fatal(err)
	}
	if g.RolloutID != r.ID || g.TenantID != f.tenant.ID || g.AgentID != "agent-1" || g.BatchID != b.ID ||
		g.KeyHash != sec.GatewayKey || g.State != gyre.StateLeased || g.Revoked || !g.Deadline.Equal(*r.Deadline) ||
		string(g.Limits) != `{"max_completions":3}` {
		t.Errorf("grant = %+v", g)
	}
	if _, err := f.s.GatewayGrant(t.Context(), sha256.Sum256([]byte("nope"))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown token: %v", err)
	}
}

func testJobs(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c"} {
		if err := s.EnqueueJob(ctx, store.JobGrade, id); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := s.ClaimJobs(ctx, "r1", []string{store.JobGrade}, 2, time.Minute)
	if err != nil || len(jobs) != 2 || jobs[0].Attempts != 1 {
		t.Fatalf("ClaimJobs = %+v, %v", jobs, err)
	}
	other, err := s.ClaimJobs(ctx, "r2", []string{store.JobGrade}, 5, time.Minute)
	if err != nil || len(other) != 1 {
		t.Fatalf("a second replica claimed %+v (%v), want only the free job", other, err)
	}
	if none, _ := s.ClaimJobs(ctx, "r2", []string{"other-kind"}, 5, time.Minute); len(none) != 0 {
		t.Errorf("claimed jobs of another kind: %+v", none)
	}
	// Finish one; re-enqueue another while it runs: finishing must not lose it.
	if err := s.FinishJob(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.EnqueueJob(ctx, store.JobGrade, jobs[1].SubjectID); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishJob(ctx, jobs[1]); err != nil {
		t.Fatal(err)
	}
	again, err := s.ClaimJobs(ctx, "r1", []string{store.JobGrade}, 5, time.Minute)
	if err != nil || len(again) != 1 || again[0].SubjectID != jobs[1].SubjectID {
		t.Fatalf("after re-enqueue during a run: %+v %v, want the re-enqueued job due", again, err)
	}
	// Retry later; a lapsed claim is due again.
	if err := s.RetryJob(ctx, again[0], 10*time.Second, "boom"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClaimJobs(ctx, "r1", []string{store.JobGrade}, 5, time.Minute); len(got) != 0 {
		t.Fatalf("a retried job was due before its delay: %+v", got)
	}
	clk.Advance(2 * time.Minute) // also lapses other[0]'s lease
	got, err := s.ClaimJobs(ctx, "r3", []string{store.JobGrade}, 5, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("after the delay and the lapse: %+v %v, want both jobs", got, err)
	}
}

func testGradeAndReads(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	b, ids := f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "gr")
	if _, err := f.submit(t, r, tok, `{"final_text":"refund done"}`, nil); err != nil {
		t.Fatal(err)
	}
	in, err := f.s.GradingInput(t.Context(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if in.Rollout.ID != r.ID || string(in.Graders) != `[{"contains":"refund"}]` || string(in.Input) != `{"question":"q0"}` || in.Completions != 0 {
		t.Errorf("grading input = %+v (graders %s, input %s)", in, in.Graders, in.Input)
	}
	rec, reason := "unreconciled", "llm_call_count_not_reported"
	for i := range 2 {
		f.clk.Advance(time.Second)
		if err := f.s.SaveGrade(t.Context(), store.GradeResult{RolloutID: r.ID, Verdicts: json.RawMessage(fmt.Sprintf(`[{"n":%d}]`, i)),
			GraderVersions: json.RawMessage(`[]`), Reconciliation: &rec, ReconciliationReason: &reason,
			TrainingGrade: false, Reasons: []string{"no_completions", "unreconciled:llm_call_count_not_reported"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := mustGet(t, f.s, f.tenant.ID, r.ID)
	if got.State != gyre.StateGraded || got.TrainingGrade == nil || *got.TrainingGrade || *got.Reconciliation != rec ||
		!slices.Equal(got.NotTrainingGradeReasons, []string{"no_completions", "unreconciled:llm_call_count_not_reported"}) {
		t.Errorf("graded rollout = %+v", got)
	}
	sets, err := f.s.VerdictSets(t.Context(), f.tenant.ID, "rollout", r.ID)
	if err != nil || len(sets) != 2 || string(sets[1].Verdicts) != `[{"n":1}]` {
		t.Fatalf("verdict sets = %+v %v, want both gradings kept, latest last", sets, err)
	}
	sum, err := f.s.BatchSummary(t.Context(), f.tenant.ID, b.ID)
	if err != nil || sum.Counts[gyre.StateGraded] != 1 || sum.Counts[gyre.StateQueued] != 1 || sum.GroupsComplete != 1 || sum.Groups != 2 {
		t.Errorf("summary = %+v %v", sum, err)
	}
	// Reads: filters and pages, newest first.
	all, next, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{}, store.Page{Limit: 1})
	if err != nil || len(all) != 1 || next == "" || all[0].ID != ids[1] {
		t.Fatalf("page 1 = %v next=%q %v", all, next, err)
	}
	rest, next, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{}, store.Page{Limit: 1, Cursor: next})
	if err != nil || len(rest) != 1 || rest[0].ID != ids[0] || next != "" {
		t.Fatalf("page 2 = %v next=%q %v", rest, next, err)
	}
	graded, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{State: gyre.StateGraded, AgentID: "agent-1", BatchID: b.ID}, store.Page{})
	if err != nil || len(graded) != 1 || graded[0].ID != r.ID {
		t.Fatalf("graded filter = %v %v", graded, err)
	}
	if _, _, err := f.s.ListRollouts(t.Context(), f.tenant.ID, store.RolloutFilter{}, store.Page{Cursor: "bad"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	agents, err := f.s.ListAgents(t.Context(), f.tenant.ID)
	if err != nil || len(agents) != 1 || agents[0].AgentID != "agent-1" || agents[0].Counts[gyre.StateGraded] != 1 {
		t.Fatalf("agents = %+v %v", agents, err)
	}
	// Exclusions count once: the output's reason, or the server's state.
	f.batch(t, store.NewBatch{TaskIDs: f.tasks[:1], MaxAttempts: 1})
	f.claimOne(t, "gx")
	f.clk.Advance(2 * time.Minute)
	if _, err := f.s.Sweep(t.Context(), 30*time.Second, 100); err != nil {
		t.Fatal(err)
	}
	agents, _ = f.s.ListAgents(t.Context(), f.tenant.ID)
	if agents[0].Exclusions["state:abandoned"] != 1 {
		t.Errorf("exclusions = %v, want state:abandoned counted", agents[0].Exclusions)
	}
}

func testRolloutIsolation(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	b, ids := f.batch(t, store.NewBatch{})
	other := mustTenant(t, f.s, "other")
	if _, err := f.s.GetRollout(t.Context(), other.ID, ids[0]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRollout across tenants: %v", err)
	}
	if _, err := f.s.BatchSummary(t.Context(), other.ID, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BatchSummary across tenants: %v", err)
	}
	if rs, _, _ := f.s.ListRollouts(t.Context(), other.ID, store.RolloutFilter{}, store.Page{}); len(rs) != 0 {
		t.Errorf("ListRollouts across tenants: %v", rs)
	}
	res, err := f.s.Claim(t.Context(), store.ClaimRequest{TenantID: other.ID, AgentID: "agent-1", Max: 1, Lease: time.Minute, Secrets: secretsN("i", 1)})
	if err != nil || len(res.Rollouts) != 0 {
		t.Errorf("claim across tenants: %+v %v", res, err)
	}
	if _, err := f.s.CancelRollout(t.Context(), other.ID, ids[0]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CancelRollout across tenants: %v", err)
	}
}

// SeedQueuedRollouts queues n rollouts of agent "agent-1" for a new
// tenant "seed", as one batch of n tasks, for engine-specific tests.
func SeedQueuedRollouts(t *testing.T, s store.Store, n int) (tenantID, agentID string) {
	t.Helper()
	f := &rolloutFixture{s: s, tenant: mustTenant(t, s, "seed")}
	f.tasks = f.seedTasks(t, f.tenant.ID, "seed-suite", n)
	if _, ids := f.batch(t, store.NewBatch{}); len(ids) != n {
		t.Fatalf("seeded %d rollouts, want %d", len(ids), n)
	}
	return f.tenant.ID, "agent-1"
}
