package harnesskit

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Every schema of Harness API v1 allows additional properties. The types
// keep them: members a type does not name are decoded into its Extra map,
// byte for byte, and encoded again after the named members (in key order),
// so that a snapshot taken through these types loses nothing. Named members
// are matched exactly, not case-insensitively as encoding/json would.

// knownNames caches, per struct type, the JSON names of its fields.
var knownNames sync.Map // reflect.Type -> map[string]bool

func jsonNames(t reflect.Type) map[string]bool {
	if m, ok := knownNames.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "" && name != "-" {
			m[name] = true
		}
	}
	knownNames.Store(t, m)
	return m
}

// unmarshalExtra decodes the object in data into dst (a pointer to a
// method-free copy of the type) and returns the members dst does not name.
func unmarshalExtra(data []byte, dst any) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, err
	}
	if all == nil { // null: leave dst alone, as encoding/json does
		return nil, nil
	}
	known := jsonNames(reflect.TypeOf(dst).Elem())
	// Rebuild an object of the named members only, their values byte for
	// byte (re-encoding would compact and escape them), and decode that.
	var named bytes.Buffer
	named.WriteByte('{')
	var extra map[string]json.RawMessage
	for k, v := range all {
		if !known[k] {
			if extra == nil {
				extra = map[string]json.RawMessage{}
			}
			extra[k] = v
			continue
		}
		if named.Len() > 1 {
			named.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		named.Write(kb)
		named.WriteByte(':')
		named.Write(v)
	}
	named.WriteByte('}')
	if err := json.Unmarshal(named.Bytes(), dst); err != nil {
		return nil, err
	}
	return extra, nil
}

// marshal is json.Marshal without HTML escaping, so that "<", ">" and "&"
// in a case input reach the harness as the suite wrote them when the caller
// encodes with SetEscapeHTML(false) (json.Marshal escapes a MarshalJSON
// result again).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// marshalExtra encodes v (a method-free copy of the type) and appends the
// extra members whose names v does not already use.
func marshalExtra(v any, extra map[string]json.RawMessage) ([]byte, error) {
	b, err := marshal(v)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	known := jsonNames(reflect.TypeOf(v))
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	first := len(b) == 2 // "{}"
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if known[k] {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		val := extra[k]
		if len(val) == 0 {
			val = json.RawMessage("null")
		}
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
