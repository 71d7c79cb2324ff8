package flywheel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// decodeInt reads a JSON number whose value is an integer. JSON Schema's
// "integer" admits any number with a zero fractional part, so 200, 200.0 and
// 2e2 all decode to 200; encoding/json alone would reject the last two.
func decodeInt(b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		return n, nil
	}
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return 0, fmt.Errorf("flywheel: cannot decode %s as an integer", truncate(b))
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, fmt.Errorf("flywheel: %s is not an integer in the int64 range", truncate(b))
	}
	return int64(f), nil
}

func truncate(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "…"
	}
	return string(b)
}

// jsonInt is an int that decodes from any integral JSON number (see
// decodeInt). The types use it only inside their UnmarshalJSON methods,
// aliasing their plain int fields through pointer conversions, so the
// exported fields stay plain ints.
type jsonInt int

// UnmarshalJSON decodes an integral number; null leaves n unchanged, as
// encoding/json does for plain ints.
func (n *jsonInt) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	v, err := decodeInt(b)
	if err != nil {
		return err
	}
	if v < math.MinInt || v > math.MaxInt {
		return fmt.Errorf("flywheel: %d overflows int", v)
	}
	*n = jsonInt(v)
	return nil
}

var _ json.Unmarshaler = (*jsonInt)(nil)
