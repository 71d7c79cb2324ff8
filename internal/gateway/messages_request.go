package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gyrehq/gyre/internal/jcs"
)

// Anthropic Messages API requests (SPEC §6.1). A request is read into the
// same chatRequest as a chat completion: its top-level members as sent,
// each message in canonical JSON (stored as a content-addressed blob), the
// tool_use ids its tool_result blocks answer, whether it streams and the
// model asked for. Only what the gateway changes or records is
// interpreted; every other member, at any depth, keeps its bytes.

// messagesItems: the Messages API's messages, whose user turns answer
// tool_use blocks with tool_result blocks naming their tool_use_id.
var messagesItems = itemRules{key: "messages", watch: [2]string{"role", "content"},
	consumed: func(vals [2][]byte, _ []byte) []string {
		role, content := vals[0], vals[1]
		if string(role) != `"user"` || len(content) == 0 || content[0] != '[' {
			return nil
		}
		return toolResultIDs(content)
	}}

// parseMessagesRequest parses a Messages request body: one JSON object
// without duplicate members, whose messages are an array of I-JSON
// objects and whose system, when present, is a string or an array of text
// blocks.
func parseMessagesRequest(body []byte) (*request, *apiError) {
	req, e := parseRequest(body, messagesItems)
	if e != nil {
		return nil, e
	}
	if v, ok := req.get("system"); ok {
		if e := checkSystem(v); e != nil {
			return nil, e
		}
	}
	return req, nil
}

// jsonString decodes a JSON string value.
func jsonString(v []byte) (string, error) {
	if len(v) == 0 || v[0] != '"' {
		return "", fmt.Errorf("not a string")
	}
	return jcs.NewWalker(v).String(0, len(v))
}

// checkSystem accepts a system prompt that is null, a string, or an array
// of text blocks (objects whose type is "text"; their other members pass
// untouched).
func checkSystem(v []byte) *apiError {
	switch v[0] {
	case 'n', '"':
		return nil
	case '[':
	default:
		return errInvalid("system", "'system' must be a string or an array of text blocks.")
	}
	w := jcs.NewWalker(v)
	var bad *apiError
	i := 0
	_, err := w.Elements(0, func(start int) (int, error) {
		param := "system[" + strconv.Itoa(i) + "]"
		i++
		end, err := w.Skip(start)
		if err != nil {
			return end, err
		}
		if typ, ok := blockType(v[start:end]); !ok || typ != "text" {
			bad = errInvalid(param, fmt.Sprintf("'%s' must be a text block ({\"type\":\"text\",\"text\":…}).", param))
			return end, errStop
		}
		return end, nil
	})
	if bad != nil {
		return bad
	}
	if err != nil {
		return errInvalid("system", "'system' must be a string or an array of text blocks.")
	}
	return nil
}

// blockType returns the type of a content block, the JSON object b.
func blockType(b []byte) (string, bool) {
	if len(b) == 0 || b[0] != '{' {
		return "", false
	}
	var typ string
	found := false
	_, err := jcs.NewWalker(b).Members(0, func(name string, start int) (int, error) {
		end, err := jcs.NewWalker(b).Skip(start)
		if err == nil && name == "type" {
			typ, err = jsonString(b[start:end])
			found = err == nil
		}
		return end, err
	})
	return typ, err == nil && found
}

// toolResultIDs lists the tool_use_id of each tool_result block of a
// message's content array.
func toolResultIDs(content []byte) []string {
	var ids []string
	w := jcs.NewWalker(content)
	_, _ = w.Elements(0, func(start int) (int, error) {
		end, err := w.Skip(start)
		if err != nil || content[start] != '{' {
			return end, err
		}
		var typ, id string
		_, err = jcs.NewWalker(content).Members(start, func(name string, vs int) (int, error) {
			ve, err := w.Skip(vs)
			if err != nil {
				return ve, err
			}
			switch name {
			case "type":
				typ, _ = jsonString(content[vs:ve])
			case "tool_use_id":
				id, _ = jsonString(content[vs:ve])
			}
			return ve, nil
		})
		if err == nil && typ == "tool_result" && id != "" {
			ids = append(ids, id)
		}
		return end, nil
	})
	return ids
}

// messagesPromptSHA256 is the prompt fingerprint of a Messages call (SPEC
// §6.1): the SHA-256 of the JCS of {"messages": [...], "system": ...},
// system left out when the request has none (absent or null). messages
// are canonical already.
func messagesPromptSHA256(messages [][]byte, members []member) string {
	var b bytes.Buffer
	b.WriteString(`{"messages":`)
	writeMessages(&b, messages)
	if v, ok := memberValue(members, "system"); ok && !isNull(v) {
		if c, err := jcs.Canonicalize(v); err == nil {
			b.WriteString(`,"system":`)
			b.Write(c)
		}
	}
	b.WriteByte('}')
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

// MessagesFingerprintSamplingKeys are the sampling params a Messages
// call's fingerprint records, after overrides.
var MessagesFingerprintSamplingKeys = []string{
	"max_tokens", "stop_sequences", "temperature", "thinking", "tool_choice", "top_k", "top_p",
}

// messagesFingerprint derives a Messages call's fingerprint from what was
// forwarded: the prompt over system and messages, the tools array, the
// sampling params and the tokenizer.
func messagesFingerprint(messages [][]byte, members []member, tokenizer *string) CallFingerprint {
	fp := CallFingerprint{PromptSHA256: messagesPromptSHA256(messages, members), Tokenizer: tokenizer}
	var sampling bytes.Buffer
	sampling.WriteByte('{')
	n := 0
	keys := slices.Clone(MessagesFingerprintSamplingKeys)
	slices.SortFunc(keys, jcs.CompareKeys)
	for _, k := range keys {
		v, ok := memberValue(members, k)
		if !ok || isNull(v) {
			continue
		}
		c, err := jcs.Canonicalize(v)
		if err != nil {
			continue
		}
		if n > 0 {
			sampling.WriteByte(',')
		}
		n++
		writeKey(&sampling, k)
		sampling.WriteByte(':')
		sampling.Write(c)
	}
	sampling.WriteByte('}')
	fp.Sampling = sampling.Bytes()
	if v, ok := memberValue(members, "tools"); ok && !isNull(v) {
		if s, err := jcs.Hash(v); err == nil {
			fp.ToolsSHA256 = &s
		}
	}
	return fp
}

// stopSequences turns a chat stop value (a string or an array of strings)
// into a Messages stop_sequences array.
func stopSequences(v json.RawMessage) (json.RawMessage, error) {
	var one string
	if json.Unmarshal(v, &one) == nil {
		return jcs.Marshal([]string{one})
	}
	var many []string
	if json.Unmarshal(v, &many) == nil && many != nil {
		return v, nil
	}
	return nil, fmt.Errorf("stop must be a string or an array of strings to map to stop_sequences")
}

// forwardMessages builds the upstream request of a Messages call for
// policy p: the policy's model and its sampling overrides mapped to
// Messages parameters (MapOverrides). A policy whose overrides cannot
// map is refused when it is created for an upstream that speaks Messages;
// one created before its upstream did is refused here (f.refused), never
// applied in part. Token capture does not apply: the Messages API returns
// no token ids. Streams need nothing added, as Messages streams always
// carry usage.
func forwardMessages(r *request, p Policy) *forwarded {
	overrides, key, err := MapOverrides(ProtocolMessages, p.SamplingOverrides)
	f := r.rewrite(func(f *forwarded, set func(key string, val []byte)) {
		f.clientUsage = true
		model, _ := json.Marshal(p.Model)
		set("model", model)
		for _, k := range sortedKeys(overrides) {
			set(k, overrides[k])
		}
	})
	if err != nil {
		f.refused = &apiError{Status: http.StatusBadRequest, Code: CodeUnsupportedProtocol,
			Message: fmt.Sprintf("Policy %q cannot serve the Messages API: its sampling_overrides key %q does not map (%v).", p.Name, key, err)}
	}
	return f
}
