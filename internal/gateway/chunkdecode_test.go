package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
)

// chunkSamples are stream events as upstreams send them, and the corners
// where encoding/json's behaviour is easy to get wrong.
var chunkSamples = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"c","choices":[{"index":0,"delta":{"content":"line one\nline \"two\" \u00e9 \ud83d\ude00"},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"order\": 7}"}}]}}]}`,
	`{"id":"c","choices":[{"index":1,"delta":{},"finish_reason":"stop","token_ids":[1,2,3e2],"logprobs":{"content":[{"token":"a","logprob":-0.1},null],"refusal":null}}]}`,
	`{"id":"c","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":3}}}`,
	`{"error":{"message":"overloaded","type":"server_error","code":null}}`,
	`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think"},"x_vendor":{"a":[1,{"b":"}"}]}}],"service_tier":"default"}`,
	` { "id" : "c" , "created" : -1.5e3 , "choices" : null , "usage" : [ 1 , 2 ] } `,
	// The slow path: a key in another case, a repeated member, a value of
	// another type, invalid UTF-8, a number in a string, not an object.
	`{"ID":"c","choices":[]}`,
	`{"id":"a","id":"b"}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"finish_reason":"stop"}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"},"delta":{"role":"assistant"}}]}`,
	`{"choices":[{"index":1.0}]}`,
	`{"choices":[{"index":99999999999999999999}]}`,
	`{"id":7}`,
	`{"created":"1700000000"}`,
	"{\"id\":\"\xff\xfe\"}",
	`{"id":"\u0069d"}`,
	`{"\u0069d":"c"}`,
	`{"choices":{"index":0}}`,
	`null`,
	`[1,2]`,
	`"text"`,
	`{"id":"c"`,
	``,
}

// TestDecodeChunk_SameAsEncodingJSON: on every sample the fast decoder
// gives what json.Unmarshal gives, error for error, and it really decodes
// the usual shapes itself.
func TestDecodeChunk_SameAsEncodingJSON(t *testing.T) {
	t.Parallel()
	fastOn := 0
	for _, s := range chunkSamples {
		sameAsEncodingJSON(t, []byte(s))
		var c chunk
		if json.Valid([]byte(s)) && (&chunkDecoder{b: []byte(s)}).chunk(&c) == nil {
			fastOn++
		}
	}
	if fastOn < 9 {
		t.Errorf("the fast path decoded %d samples, want at least the 9 usual ones", fastOn)
	}
}

func sameAsEncodingJSON(t *testing.T, data []byte) {
	t.Helper()
	var want, got chunk
	wantErr := json.Unmarshal(data, &want)
	gotErr := decodeChunk(data, &got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: decodeChunk error %v, json.Unmarshal error %v", data, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%q:\ndecodeChunk    %#v\njson.Unmarshal %#v", data, got, want)
	}
}

// FuzzDecodeChunk holds decodeChunk to json.Unmarshal on any input.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsEncodingJSON(t, data)
	})
}

func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(chunkSamples[0])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var c chunk
			if err := decodeChunk(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var c chunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
