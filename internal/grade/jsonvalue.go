package grade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
)

// decodeValue decodes one JSON value keeping numbers as json.Number.
func decodeValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// jsonEqual compares two decoded JSON values the way their JCS forms would
// compare: object key order does not matter, strings compare exactly, and
// numbers compare by their IEEE 754 double value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numberEqual(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

func numberEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	fa, errA := strconv.ParseFloat(string(a), 64)
	fb, errB := strconv.ParseFloat(string(b), 64)
	if errA == nil && errB == nil {
		return fa == fb
	}
	// Out of double range: compare exactly.
	ra, okA := new(big.Rat).SetString(string(a))
	rb, okB := new(big.Rat).SetString(string(b))
	return okA && okB && ra.Cmp(rb) == 0
}

// jsonSubset reports whether want matches got: objects match when every
// key of want is in got with a matching value (recursively); arrays and
// scalars must be equal (jsonEqual).
func jsonSubset(want, got any) bool {
	w, ok := want.(map[string]any)
	if !ok {
		return jsonEqual(want, got)
	}
	g, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, wv := range w {
		gv, ok := g[k]
		if !ok || !jsonSubset(wv, gv) {
			return false
		}
	}
	return true
}

// text renders a decoded value as grader text: a string as itself, anything
// else as compact JSON with sorted keys and no HTML escaping.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
