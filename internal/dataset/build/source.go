// Package build turns a frozen dataset of the store into its file: a
// dataset.Source that reads the frozen members a page at a time and
// rebuilds each rollout's counted completions from the gateway's records
// and the content-addressed message blobs, and the durable job that
// writes the file to the blob store and records the outcome.
package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// ReasonBodiesMissing: a rollout whose recorded bodies were captured but
// whose blobs are gone (deleted by retention or by hand). It is not
// exported, and the build goes on.
const ReasonBodiesMissing = "bodies_missing"

// pageSize is how many frozen members one read returns: memory holds one
// page of ids and the traffic of the rollouts being read, whatever the
// size of the dataset.
const pageSize = 256

// readAhead is how many members are read at once, ahead of the writer:
// one rollout's store and blob reads wait on the disk while another's
// run, and the writer works on one while the next are read. Memory holds
// the traffic of at most readAhead+2 rollouts.
const readAhead = 8

// source is a dataset.Source over one frozen dataset.
type source struct {
	ctx   context.Context
	st    store.Store
	blobs gateway.BlobReader
	ds    store.Dataset

	mu sync.Mutex
	// suites are the suite names and versions of the tasks read, up to
	// maxTasks: a dataset's members come from a suite's tasks over and
	// over, and a bound keeps memory flat however many tasks it spans.
	suites map[string]suiteOf
}

// suiteOf is the suite a task belongs to.
type suiteOf struct{ name, version string }

// maxTasks bounds the source's task cache; when it is full it starts
// over.
const maxTasks = 1024

// newSource returns the source of a build; blobs is nil when there is
// no blob store.
func newSource(ctx context.Context, st store.Store, blobs gateway.BlobReader, ds store.Dataset) *source {
	return &source{ctx: ctx, st: st, blobs: blobs, ds: ds, suites: map[string]suiteOf{}}
}

// Rollouts yields the members in rollout id order.
func (s *source) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return readInOrder(s.ctx, s.members(), s.rollout)
}

// members yields the frozen members in rollout id order, a page at a
// time.
func (s *source) members() iter.Seq2[store.DatasetMember, error] {
	return func(yield func(store.DatasetMember, error) bool) {
		after := ""
		for {
			page, err := s.st.DatasetMembers(s.ctx, s.ds.ID, after, pageSize)
			if err != nil {
				yield(store.DatasetMember{}, err)
				return
			}
			for _, m := range page {
				if !yield(m, nil) {
					return
				}
			}
			if len(page) < pageSize {
				return
			}
			after = page[len(page)-1].RolloutID
		}
	}
}

// Groups yields the members group by group, in group then rollout id
// order; only one group is held at a time.
func (s *source) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		var group []*dataset.Rollout
		for r, err := range readInOrder(s.ctx, s.groupMembers(), s.rollout) {
			if err != nil {
				yield(nil, err)
				return
			}
			if len(group) > 0 && group[0].GroupID != r.GroupID {
				if !yield(group, nil) {
					return
				}
				group = nil
			}
			group = append(group, r)
		}
		if len(group) > 0 {
			yield(group, nil)
		}
	}
}

// groupMembers yields the frozen members in group then rollout id order,
// a page at a time.
func (s *source) groupMembers() iter.Seq2[store.DatasetMember, error] {
	return func(yield func(store.DatasetMember, error) bool) {
		afterG, afterR := "", ""
		for {
			page, err := s.st.DatasetGroupMembers(s.ctx, s.ds.ID, afterG, afterR, pageSize)
			if err != nil {
				yield(store.DatasetMember{}, err)
				return
			}
			for _, m := range page {
				if !yield(m, nil) {
					return
				}
			}
			if len(page) < pageSize {
				return
			}
			afterG, afterR = page[len(page)-1].GroupID, page[len(page)-1].RolloutID
		}
	}
}

// readInOrder reads the members that ms yields with read, up to readAhead
// at once, and yields the rollouts in ms's order, so the file is the same
// bytes however the reads interleave. It stops at the first error.
func readInOrder(ctx context.Context, ms iter.Seq2[store.DatasetMember, error],
	read func(store.DatasetMember) (*dataset.Rollout, error)) iter.Seq2[*dataset.Rollout, error] {
	type slot struct {
		r    *dataset.Rollout
		err  error
		done chan struct{}
	}
	return func(yield func(*dataset.Rollout, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		queue := make(chan *slot, readAhead)
		var reads sync.WaitGroup
		go func() {
			defer close(queue)
			for m, err := range ms {
				sl := &slot{err: err, done: make(chan struct{})}
				select {
				case queue <- sl:
				case <-ctx.Done():
					return
				}
				if err != nil {
					close(sl.done)
					return
				}
				reads.Go(func() {
					defer close(sl.done)
					sl.r, sl.err = read(m)
				})
			}
		}()
		defer func() {
			// Stopped early: let the member reader see it, drop what
			// was read ahead and wait for the reads in flight.
			cancel()
			for range queue {
			}
			reads.Wait()
		}()
		for sl := range queue {
			<-sl.done
			if !yield(sl.r, sl.err) || sl.err != nil {
				return
			}
		}
	}
}

// rollout reads one frozen member: the verdict set, training grade and
// reward come from the frozen copy; the traffic, fingerprints and tool
// calls from the records, which never change once graded.
func (s *source) rollout(m store.DatasetMember) (*dataset.Rollout, error) {
	r := &dataset.Rollout{ID: m.RolloutID, TaskID: m.TaskID, GroupID: m.GroupID, BatchID: m.BatchID,
		TrainingGrade: m.TrainingGrade, NotTrainingGradeReasons: m.NotTrainingGrade}
	if m.Verdicts != nil {
		if err := json.Unmarshal(m.Verdicts, &r.Verdicts.Verdicts); err != nil {
			return nil, fmt.Errorf("rollout %s: frozen verdicts: %w", m.RolloutID, err)
		}
	}
	if m.GraderVersions != nil {
		if err := json.Unmarshal(m.GraderVersions, &r.Verdicts.Graders); err != nil {
			return nil, fmt.Errorf("rollout %s: frozen graders: %w", m.RolloutID, err)
		}
	}
	if r.TrainingGrade == nil || !*r.TrainingGrade {
		// Not exported whatever its traffic: reading it would be waste.
		return r, nil
	}
	suite, err := s.suite(m)
	if err != nil {
		return nil, err
	}
	r.Suite, r.SuiteVersion = suite.name, suite.version
	ro, err := s.st.GetRollout(s.ctx, s.ds.TenantID, m.RolloutID)
	if err != nil {
		return nil, fmt.Errorf("rollout %s: %w", m.RolloutID, err)
	}
	r.ServerFingerprint = ro.ServerFingerprint
	if ro.Output != nil {
		var out flywheel.RolloutOutput
		if err := json.Unmarshal(ro.Output, &out); err != nil {
			return nil, fmt.Errorf("rollout %s: stored output: %w", m.RolloutID, err)
		}
		r.AgentFingerprint = out.AgentFingerprint
		if calls, ok := out.ToolCalls.Get(); ok {
			r.ToolCalls = calls
		}
	}
	if r.AgentName == "" && !hasFingerprintName(r.AgentFingerprint) {
		r.AgentName = ro.AgentID
	}
	calls, err := s.st.GatewayCalls(s.ctx, s.ds.TenantID, m.RolloutID)
	if err != nil {
		return nil, fmt.Errorf("rollout %s: calls: %w", m.RolloutID, err)
	}
	body := gateway.NewBodyReader(s.blobs, s.ds.TenantID)
	for _, c := range calls {
		if !c.Counted {
			continue
		}
		if r.Policy == "" && c.Policy != nil {
			r.Policy = *c.Policy
		}
		if c.RequestBlob == nil || c.ResponseBlob == nil || s.blobs == nil {
			r.Unavailable, r.Completions = grade.NotGradeBodiesNotCaptured, nil
			return r, nil
		}
		bodies, err := body.Read(s.ctx, c.GatewayRecord)
		if errors.Is(err, blobstore.ErrNotFound) {
			r.Unavailable, r.Completions = ReasonBodiesMissing, nil
			return r, nil
		}
		if err != nil {
			return nil, fmt.Errorf("rollout %s: completion %d: %w", m.RolloutID, c.Seq, err)
		}
		comp, err := completion(c, bodies, r)
		if err != nil {
			return nil, fmt.Errorf("rollout %s: completion %d: %w", m.RolloutID, c.Seq, err)
		}
		r.Completions = append(r.Completions, comp)
	}
	return r, nil
}

// suite returns the suite of the member's task, reading the task once
// while the cache keeps it.
func (s *source) suite(m store.DatasetMember) (suiteOf, error) {
	s.mu.Lock()
	v, ok := s.suites[m.TaskID]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	t, err := s.st.Task(s.ctx, s.ds.TenantID, m.TaskID)
	if err != nil {
		return v, fmt.Errorf("rollout %s: task: %w", m.RolloutID, err)
	}
	v = suiteOf{t.SuiteName, t.SuiteVersion}
	s.mu.Lock()
	if len(s.suites) >= maxTasks {
		clear(s.suites)
	}
	s.suites[m.TaskID] = v
	s.mu.Unlock()
	return v, nil
}

func hasFingerprintName(fp json.RawMessage) bool {
	var v struct {
		Name any `json:"name"`
	}
	_ = json.Unmarshal(fp, &v) // a fingerprint of another shape names nothing
	s, _ := v.Name.(string)
	return s != ""
}

// completion splits a recorded call's bodies the way the writers read
// them. A Responses or Messages call keeps its native turn for rl and is
// converted to chat for the other formats; one that has no chat form
// sets r.NoChatForm instead (SPEC §6.1).
func completion(c store.GatewayCall, b gateway.CallBodies, r *dataset.Rollout) (dataset.Completion, error) {
	out := dataset.Completion{Seq: c.Seq, Protocol: c.Protocol, Usage: c.Usage, ReceivedAt: c.ReceivedAt}
	if out.Protocol == "" {
		out.Protocol = string(gateway.ProtocolChat)
	}
	if c.Model != nil {
		out.Model = *c.Model
	}
	if c.DoneAt != nil {
		out.DoneAt = *c.DoneAt
	}
	if out.Protocol != string(gateway.ProtocolChat) {
		native, err := gateway.Native(out.Protocol, b)
		if err != nil {
			return out, err
		}
		out.Native = &dataset.Native{Items: native.Items, Tools: native.Tools, Response: native.Response}
		out.Sampling = sampling(c.Fingerprint)
		if r.NoChatForm != "" {
			return out, nil
		}
		chat, err := gateway.ChatBodies(out.Protocol, b)
		var ne *gateway.NotExportableError
		if errors.As(err, &ne) {
			r.NoChatForm = ne.Reason()
			return out, nil
		}
		if err != nil {
			return out, err
		}
		b = chat
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return out, fmt.Errorf("request: %w", err)
	}
	if err := json.Unmarshal(req["messages"], &out.Request.Messages); err != nil {
		return out, fmt.Errorf("request messages: %w", err)
	}
	if t, ok := req["tools"]; ok && string(t) != "null" {
		out.Request.Tools = t
	}
	delete(req, "messages")
	delete(req, "tools")
	if len(req) > 0 {
		rest, err := json.Marshal(req)
		if err != nil {
			return out, err
		}
		out.Request.Rest = rest
	}
	var resp struct {
		PromptTokenIDs []int `json:"prompt_token_ids"`
		Choices        []struct {
			Message      json.RawMessage `json:"message"`
			FinishReason *string         `json:"finish_reason"`
			TokenIDs     []int           `json:"token_ids"`
			Logprobs     *struct {
				Content []struct {
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b.Response, &resp); err != nil {
		return out, fmt.Errorf("response: %w", err)
	}
	if len(resp.Choices) == 0 || len(resp.Choices[0].Message) == 0 {
		return out, errors.New("response has no message")
	}
	ch := resp.Choices[0]
	out.Response = ch.Message
	if ch.FinishReason != nil {
		out.FinishReason = *ch.FinishReason
	}
	out.PromptTokenIDs, out.CompletionTokenIDs = resp.PromptTokenIDs, ch.TokenIDs
	if ch.Logprobs != nil && len(ch.Logprobs.Content) > 0 {
		out.Logprobs = make([]float64, len(ch.Logprobs.Content))
		for i, lp := range ch.Logprobs.Content {
			out.Logprobs[i] = lp.Logprob
		}
	}
	out.Sampling = sampling(c.Fingerprint)
	return out, nil
}

// sampling is the sampling params a call's fingerprint records, nil when
// none.
func sampling(fingerprint json.RawMessage) json.RawMessage {
	if len(fingerprint) == 0 {
		return nil
	}
	var fp struct {
		Sampling json.RawMessage `json:"sampling"`
	}
	if err := json.Unmarshal(fingerprint, &fp); err == nil && len(fp.Sampling) > 0 && string(fp.Sampling) != "null" {
		return fp.Sampling
	}
	return nil
}
