package dataset_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/grade"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sliceSource is a Source over rollouts held in memory.
type sliceSource []*dataset.Rollout

func (s sliceSource) sorted() []*dataset.Rollout {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b *dataset.Rollout) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (s sliceSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for _, r := range s.sorted() {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func (s sliceSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		byGroup := map[string][]*dataset.Rollout{}
		var ids []string
		for _, r := range s.sorted() {
			if _, ok := byGroup[r.GroupID]; !ok {
				ids = append(ids, r.GroupID)
			}
			byGroup[r.GroupID] = append(byGroup[r.GroupID], r)
		}
		slices.Sort(ids)
		for _, g := range ids {
			if !yield(byGroup[g], nil) {
				return
			}
		}
	}
}

// Message builders: each returns one chat message as JSON text.
func sys(text string) string  { return obj("role", "system", "content", text) }
func user(text string) string { return obj("role", "user", "content", text) }
func asst(text string) string { return obj("role", "assistant", "content", text) }
func tool(id, text string) string {
	return obj("role", "tool", "tool_call_id", id, "content", text)
}

// call is one tool call of an assistant message.
func call(id, name, args string) map[string]any {
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
}

// asstCalls is an assistant message with tool calls and no content.
func asstCalls(calls ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": calls})
	return string(b)
}

// reply is a response message as an OpenAI response carries it, with the
// members a training message drops.
func reply(msg string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(msg), &m); err != nil {
		panic(err)
	}
	m["refusal"] = nil
	m["annotations"] = []any{}
	b, _ := json.Marshal(m)
	return string(b)
}

func obj(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func raws(msgs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		out[i] = json.RawMessage(m)
	}
	return out
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

// comp is a counted completion: the request's messages and the response
// message (as a response carries it).
func comp(seq int, resp string, msgs ...string) dataset.Completion {
	return dataset.Completion{
		Seq:          seq,
		Protocol:     "chat",
		Model:        "m-1",
		Request:      dataset.Request{Messages: raws(msgs...), Tools: json.RawMessage(weatherTools), Rest: json.RawMessage(`{"model":"m-1","parallel_tool_calls":false,"temperature":0.7}`)},
		Response:     json.RawMessage(reply(resp)),
		FinishReason: "stop",
		Usage:        json.RawMessage(`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`),
		Sampling:     json.RawMessage(`{"temperature":0.7}`),
		ReceivedAt:   t0.Add(time.Duration(seq) * time.Second),
		DoneAt:       t0.Add(time.Duration(seq)*time.Second + 300*time.Millisecond),
	}
}

// verdicts is a frozen verdict set whose reward is score: one grader.
func verdicts(score float64) grade.VerdictSet {
	pass := score >= 1
	return grade.VerdictSet{
		ItemSchema: "gyre.graded-item/1",
		Verdicts:   []grade.Verdict{{Grader: "answer", Pass: &pass, Score: &score, Reason: "graded"}},
		Graders:    []grade.GraderRef{{Label: "answer", Name: "contains", Version: "1"}},
	}
}

// rollout is a training-grade rollout with reward score.
func rollout(id, group string, score float64, comps ...dataset.Completion) *dataset.Rollout {
	ok := true
	return &dataset.Rollout{
		ID: id, TaskID: "task-" + group, GroupID: group, BatchID: "batch-1",
		Policy: "pol-a", Suite: "weather", SuiteVersion: "v1",
		Completions:       comps,
		Verdicts:          verdicts(score),
		TrainingGrade:     &ok,
		ServerFingerprint: json.RawMessage(`{"prompt_sha256":["ab"],"sampling":[{"temperature":0.7}],"tokenizer":null,"tools_sha256":[]}`),
		AgentFingerprint:  json.RawMessage(`{"name":"weather-agent","version":"1.2.0"}`),
	}
}

// weatherRollout is a two-completion rollout: a tool call, then the answer.
func weatherRollout(id, group string, score float64, callID, answer string) *dataset.Rollout {
	s, u := sys("You answer weather questions."), user("Weather in Paris?")
	c1 := asstCalls(call(callID, "get_weather", `{"city":"Paris"}`))
	return rollout(id, group, score,
		comp(1, c1, s, u),
		comp(2, asst(answer), s, u, c1, tool(callID, `{"temp_c":18}`)),
	)
}

func sel(f dataset.Format) dataset.Selection {
	return dataset.Selection{ID: "01938f00-0000-7000-8000-000000000001", CreatedAt: t0, AgentID: "weather-agent", Format: f}
}

// write builds a dataset and returns its bytes and manifest.
func write(t testing.TB, s dataset.Selection, src sliceSource) ([]byte, dataset.Manifest) {
	t.Helper()
	var b bytes.Buffer
	m, err := dataset.Write(&b, s, src)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.Bytes(), m
}

// lines splits a file into its rows, checking each ends with \n.
func lines(t testing.TB, file []byte) [][]byte {
	t.Helper()
	if len(file) == 0 {
		return nil
	}
	if file[len(file)-1] != '\n' {
		t.Fatalf("file does not end with a newline")
	}
	return bytes.Split(file[:len(file)-1], []byte("\n"))
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func decode(t testing.TB, row []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(row, &m); err != nil {
		t.Fatalf("row is not JSON: %v\n%s", err, row)
	}
	return m
}
