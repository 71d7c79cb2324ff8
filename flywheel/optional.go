package flywheel

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
)

// Optional is an object member that the contract makes both optional and
// nullable, so it has three distinct states on the wire: absent, null, or a
// value. The zero Optional is absent.
//
// Use it with the omitzero option (`json:"name,omitzero"`): encoding/json
// then omits an absent member, writes null for Null and the value for Some.
// Decoding leaves a member the input does not mention absent, turns null into
// Null and anything else into Some.
//
// Some(v) always encodes as a value, never as null: a nil slice or map inside
// Some encodes as [] or {}. Null is spelled Null.
type Optional[T any] struct {
	value T
	state optionalState
}

type optionalState uint8

const (
	stateAbsent optionalState = iota
	stateNull
	stateValue
)

// Some returns an Optional holding v.
func Some[T any](v T) Optional[T] { return Optional[T]{value: v, state: stateValue} }

// Null returns an Optional that is present and null.
func Null[T any]() Optional[T] { return Optional[T]{state: stateNull} }

// IsZero reports whether o is absent; it is what omitzero consults.
func (o Optional[T]) IsZero() bool { return o.state == stateAbsent }

// IsAbsent reports whether the member is absent.
func (o Optional[T]) IsAbsent() bool { return o.state == stateAbsent }

// IsNull reports whether the member is present and null.
func (o Optional[T]) IsNull() bool { return o.state == stateNull }

// IsSet reports whether the member holds a value (present and not null).
func (o Optional[T]) IsSet() bool { return o.state == stateValue }

// Get returns the value and true, or the zero T and false when o is absent
// or null.
func (o Optional[T]) Get() (T, bool) { return o.value, o.state == stateValue }

// Or returns the value, or def when o is absent or null.
func (o Optional[T]) Or(def T) T {
	if o.state == stateValue {
		return o.value
	}
	return def
}

// errAbsentMarshal reports an absent Optional reaching the encoder, which
// means its field lacks the omitzero option.
var errAbsentMarshal = errors.New("flywheel: absent Optional marshalled; tag its field omitzero")

// MarshalJSON writes null for Null and the value for Some. An absent
// Optional is an error: its field must carry omitzero so it is never encoded.
func (o Optional[T]) MarshalJSON() ([]byte, error) {
	switch o.state {
	case stateNull:
		return []byte("null"), nil
	case stateValue:
		b, err := marshal(o.value)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(b, []byte("null")) {
			switch reflect.TypeFor[T]().Kind() {
			case reflect.Slice:
				return []byte("[]"), nil
			case reflect.Map:
				return []byte("{}"), nil
			}
			return nil, errors.New("flywheel: Some holds a value that encodes as null; use Null")
		}
		return b, nil
	}
	return nil, errAbsentMarshal
}

// UnmarshalJSON sets o to Null for null and to Some otherwise. Integer types
// accept any JSON number with an integral value (7, 7.0, 7e0), as JSON Schema
// does.
func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		var zero T
		*o = Optional[T]{value: zero, state: stateNull}
		return nil
	}
	var v T
	switch p := any(&v).(type) {
	case *int:
		n, err := decodeInt(b)
		if err != nil {
			return err
		}
		*p = int(n)
	case *int64:
		n, err := decodeInt(b)
		if err != nil {
			return err
		}
		*p = n
	default:
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
	}
	*o = Some(v)
	return nil
}
