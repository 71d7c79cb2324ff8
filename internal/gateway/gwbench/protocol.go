package main

import (
	"bytes"
	"fmt"
)

// benchProtocol is one wire protocol the benchmark speaks: the path its
// requests go to (under the /v1 root), the two request bodies, the stub's
// two answers, and how a client ends a stream, as the protocol's SDK does:
// openai-go stops reading a chat stream at [DONE]; a Responses or
// Messages stream has no such sentinel, so the SDKs read it to the end of
// the body, and the stream must have carried its final event.
type benchProtocol struct {
	name string
	// path is the endpoint under /v1, e.g. "/chat/completions".
	path       string
	bodyWhole  []byte
	bodyStream []byte
	// whole is the stub's JSON answer; events its stream's events, each
	// ending in a blank line; tail what follows the last event (chat's
	// usage chunk when asked for, and [DONE]).
	whole  []byte
	events []byte
	// final is true for the stream line on which the answer is complete.
	final func(line string) bool
	// toEOF: the client reads on from the final event to the end of the
	// body, and the answer's latency is to there.
	toEOF bool
}

// benchProtocols builds the three protocols' requests and answers, each
// stream with chunks content deltas.
func benchProtocols(chunks int) map[string]*benchProtocol {
	return map[string]*benchProtocol{"chat": chatProtocol(chunks), "responses": responsesProtocol(chunks), "messages": messagesProtocol(chunks)}
}

func chatProtocol(chunks int) *benchProtocol {
	var events bytes.Buffer
	chunk := func(delta, finish string) {
		fmt.Fprintf(&events, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	for i := range chunks {
		chunk(fmt.Sprintf(`{"content":"word%d "}`, i), "null")
	}
	chunk(`{}`, `"stop"`)
	return &benchProtocol{
		name:       "chat",
		path:       "/chat/completions",
		bodyWhole:  []byte(`{"model":"agent-model","messages":[{"role":"system","content":"You are a support agent."},{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		bodyStream: []byte(`{"model":"agent-model","stream":true,"messages":[{"role":"system","content":"You are a support agent."},{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		whole:      []byte(`{"id":"chatcmpl-b","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"The refund for order 7 has been issued."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}`),
		events:     events.Bytes(),
		final:      func(line string) bool { return line == "data: [DONE]" },
	}
}

// chatUsage is the usage chunk a chat stream sends before [DONE] when the
// request asked for it (the gateway asks, to price the call).
var chatUsage = []byte(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}` + "\n\n")

func responsesProtocol(chunks int) *benchProtocol {
	const (
		usage   = `{"input_tokens":24,"input_tokens_details":{"cached_tokens":0},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":33}`
		message = `{"type":"message","id":"msg_b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The refund for order 7 has been issued.","annotations":[]}]}`
	)
	final := `{"id":"resp_b","object":"response","created_at":1700000000,"status":"completed","model":"bench-model","output":[` + message + `],"usage":` + usage + `,"error":null,"incomplete_details":null}`
	var events bytes.Buffer
	seq := 0
	ev := func(typ, data string) {
		fmt.Fprintf(&events, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, data)
		seq++
	}
	ev("response.created", `"response":{"id":"resp_b","object":"response","created_at":1700000000,"status":"in_progress","model":"bench-model","output":[]}`)
	ev("response.output_item.added", `"output_index":0,"item":{"type":"message","id":"msg_b","status":"in_progress","role":"assistant","content":[]}`)
	for i := range chunks {
		ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_b","output_index":0,"content_index":0,"delta":"word%d "`, i))
	}
	ev("response.output_item.done", `"output_index":0,"item":`+message)
	ev("response.completed", `"response":`+final)
	return &benchProtocol{
		name:       "responses",
		path:       "/responses",
		bodyWhole:  []byte(`{"model":"agent-model","instructions":"You are a support agent.","input":[{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		bodyStream: []byte(`{"model":"agent-model","stream":true,"instructions":"You are a support agent.","input":[{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		whole:      []byte(final),
		events:     events.Bytes(),
		final: func(line string) bool {
			return bytes.HasPrefix([]byte(line), []byte(`data: {"type":"response.completed"`))
		},
		toEOF: true,
	}
}

func messagesProtocol(chunks int) *benchProtocol {
	var events bytes.Buffer
	ev := func(typ, data string) {
		fmt.Fprintf(&events, "event: %s\ndata: {\"type\":%q%s}\n\n", typ, typ, data)
	}
	ev("message_start", `,"message":{"id":"msg_b","type":"message","role":"assistant","model":"bench-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}`)
	ev("content_block_start", `,"index":0,"content_block":{"type":"text","text":""}`)
	for i := range chunks {
		ev("content_block_delta", fmt.Sprintf(`,"index":0,"delta":{"type":"text_delta","text":"word%d "}`, i))
	}
	ev("content_block_stop", `,"index":0`)
	ev("message_delta", `,"delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}`)
	ev("message_stop", ``)
	return &benchProtocol{
		name:       "messages",
		path:       "/messages",
		bodyWhole:  []byte(`{"model":"agent-model","max_tokens":256,"system":"You are a support agent.","messages":[{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		bodyStream: []byte(`{"model":"agent-model","max_tokens":256,"stream":true,"system":"You are a support agent.","messages":[{"role":"user","content":"Please refund order 7."}],"temperature":0.2}`),
		whole:      []byte(`{"id":"msg_b","type":"message","role":"assistant","model":"bench-model","content":[{"type":"text","text":"The refund for order 7 has been issued."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":9}}`),
		events:     events.Bytes(),
		final:      func(line string) bool { return line == `data: {"type":"message_stop"}` },
		toEOF:      true,
	}
}
