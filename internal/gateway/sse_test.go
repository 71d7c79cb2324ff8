package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	in := "data: one\n\n" +
		": keep-alive\n\n" +
		"data: two\r\ndata: lines\r\n\r\n" +
		"\n\n" +
		"event: x\ndata:three\n\n" +
		"data: last-without-blank-line"
	rd := newSSEReader(strings.NewReader(in), 1<<20)
	type ev struct {
		raw, data string
		has       bool
	}
	var got []ev
	for {
		raw, data, has, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev{string(raw), string(data), has})
	}
	want := []ev{
		{"data: one\n\n", "one", true},
		{": keep-alive\n\n", "", false},
		{"data: two\r\ndata: lines\r\n\r\n", "two\nlines", true},
		{"event: x\ndata:three\n\n", "three", true},
		{"data: last-without-blank-line", "last-without-blank-line", true},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSSEReader_LongLinesAndLimit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10) // longer than the reader's buffer
	rd := newSSEReader(strings.NewReader("data: "+long+"\n\n"), 1<<20)
	_, data, _, err := rd.next()
	if err != nil || string(data) != long {
		t.Fatalf("long event: %d bytes, %v", len(data), err)
	}
	rd = newSSEReader(strings.NewReader("data: "+long+"\n\n"), 1<<10)
	if _, _, _, err := rd.next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}

// feed folds JSON chunks into an accumulator.
func feed(t *testing.T, chunks ...string) *streamAcc {
	t.Helper()
	acc := &streamAcc{}
	for _, c := range chunks {
		var ch chunk
		if err := json.Unmarshal([]byte(c), &ch); err != nil {
			t.Fatalf("chunk %s: %v", c, err)
		}
		acc.add(&ch, len(c))
	}
	return acc
}

func TestStreamAcc_ToolCallArgumentsInPiecesOrWhole(t *testing.T) {
	t.Parallel()
	head := `{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup","arguments":""}}]}}]}`
	pieces := feed(t, head,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" 1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"other","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"total_tokens":5}}`)
	whole := feed(t,
		`{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup","arguments":"{\"q\": 1}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"other","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"total_tokens":5}}`)
	want := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"lookup","arguments":"{\"q\": 1}"}},{"id":"call_b","type":"function","function":{"name":"other","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"total_tokens":5}}`
	for name, acc := range map[string]*streamAcc{"pieces": pieces, "whole": whole} {
		if got := string(acc.response()); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !acc.finished() || strings.Join(acc.emitted(), ",") != "call_a,call_b" {
			t.Errorf("%s: finished %v emitted %v", name, acc.finished(), acc.emitted())
		}
	}
}

func TestStreamAcc_ToolCallsWithoutIndex(t *testing.T) {
	t.Parallel()
	// Some servers send no index: deltas merge by id, then into the last call.
	acc := feed(t,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{\"a"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"y","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
	var r struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if err := json.Unmarshal(acc.response(), &r); err != nil {
		t.Fatal(err)
	}
	tc := r.Choices[0].Message.ToolCalls
	if len(tc) != 2 || tc[0].ID != "x" || tc[0].Function.Arguments != `{"a":1}` || tc[1].ID != "y" || tc[1].Function.Name != "g" {
		t.Errorf("tool calls %+v", tc)
	}
}

func TestStreamAcc_SeveralChoicesAllMustFinish(t *testing.T) {
	t.Parallel()
	acc := feed(t,
		`{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	if acc.finished() {
		t.Fatal("finished with choice 1 open")
	}
	acc = feed(t,
		`{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"length","logprobs":{"content":[{"token":"b","logprob":-0.1}]}}]}`)
	if !acc.finished() {
		t.Fatal("not finished")
	}
	got := string(acc.response())
	if !strings.Contains(got, `"choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":null,"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"b"},"logprobs":{"content":[{"token":"b","logprob":-0.1}]},"finish_reason":"length"}]`) {
		t.Errorf("response %s", got)
	}
	if feed(t).finished() {
		t.Error("a stream without choices counts as finished")
	}
}

func FuzzSSEStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"x\"}}]}}]}\r\n\r\n: c\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := newSSEReader(strings.NewReader(string(b)), 1<<16)
		acc := &streamAcc{}
		for range 10000 {
			_, data, has, err := rd.next()
			if err != nil {
				break
			}
			var ch chunk
			if has && json.Unmarshal(data, &ch) == nil {
				acc.add(&ch, len(data))
			}
		}
		if !json.Valid(acc.response()) {
			t.Fatalf("reassembled response is not JSON: %s", acc.response())
		}
	})
}
