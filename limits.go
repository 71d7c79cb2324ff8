package gyre

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
)

// Limits are a batch's gateway limits (SPEC §6.1): a request past one of
// them is refused with 429 rollout_budget_exhausted. A nil field is no
// limit. The batch API decodes them from a request and the gateway from
// the stored batch with the one decoder, DecodeLimits, so the two can
// never disagree about what a limits object says.
type Limits struct {
	// MaxCompletions caps the rollout's counted completions.
	MaxCompletions *int64 `json:"max_completions"`
	// MaxTotalTokens caps the sum of usage.total_tokens of its calls.
	MaxTotalTokens *int64 `json:"max_total_tokens"`
	// MaxCostUSD caps the priced cost of its calls.
	MaxCostUSD *float64 `json:"max_cost_usd"`
	// MaxConcurrentRequests caps its requests in flight at once.
	MaxConcurrentRequests *int64 `json:"max_concurrent_requests"`
}

// DecodeLimits strictly reads a limits object: a JSON object whose members
// are the four limits, each null (no limit) or a non-negative number,
// integral except max_cost_usd. Anything else — another member, a
// duplicate, a string, a fraction — is an *Error (invalid_body) whose
// Pointer is relative to the object, e.g. "/max_completions".
func DecodeLimits(b []byte) (Limits, error) {
	var l Limits
	bad := func(ptr, format string, args ...any) error {
		return Errorf(CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return Limits{}, bad("", "limits must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Limits{}, bad("", "limits is not valid JSON")
		}
		name, _ := tok.(string)
		ptr := "/" + pointerEscaper.Replace(name)
		var v any
		if err := dec.Decode(&v); err != nil {
			return Limits{}, bad(ptr, "limits is not valid JSON")
		}
		if seen[name] {
			return Limits{}, bad(ptr, "limit %q appears more than once", name)
		}
		seen[name] = true
		var intDst **int64
		switch name {
		case "max_completions":
			intDst = &l.MaxCompletions
		case "max_total_tokens":
			intDst = &l.MaxTotalTokens
		case "max_concurrent_requests":
			intDst = &l.MaxConcurrentRequests
		case "max_cost_usd":
		default:
			return Limits{}, bad(ptr, "unknown limit %q (known: max_completions, max_total_tokens, max_cost_usd, max_concurrent_requests)", name)
		}
		if v == nil {
			continue
		}
		num, ok := v.(json.Number)
		if !ok {
			return Limits{}, bad(ptr, "%s must be a number or null", name)
		}
		if intDst == nil {
			f, err := strconv.ParseFloat(string(num), 64)
			if err != nil || math.IsInf(f, 0) || f < 0 {
				return Limits{}, bad(ptr, "max_cost_usd must be a finite number of dollars, not negative")
			}
			l.MaxCostUSD = &f
			continue
		}
		n, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || n < 0 {
			return Limits{}, bad(ptr, "%s must be a whole number from 0 to %d", name, int64(math.MaxInt64))
		}
		*intDst = &n
	}
	if _, err := dec.Token(); err != nil {
		return Limits{}, bad("", "limits is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Limits{}, bad("", "limits has data after the JSON object")
	}
	return l, nil
}

// pointerEscaper escapes a member name as a JSON Pointer token (RFC 6901).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
