package jcs

import (
	"fmt"
	"math"
	"strconv"
)

// AppendNumber appends f serialized as ECMAScript's Number.prototype.toString
// does, which is what RFC 8785 §3.2.2.3 prescribes: the shortest digit string
// that round-trips, in plain notation for exponents in [-7, 21) and in
// exponential notation ("1e+21", "1e-7") outside it; -0 is written "0". NaN
// and infinities have no JSON form and are rejected.
func AppendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("jcs: %v has no JSON representation", f)
	}
	if f == 0 {
		return append(dst, '0'), nil // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-tripping digits d1d2…dk and exponent: f = 0.d1…dk × 10^n.
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp := e, 0
	for i, c := range e {
		if c == 'e' {
			mant = e[:i]
			x, err := strconv.Atoi(string(e[i+1:]))
			if err != nil {
				return dst, fmt.Errorf("jcs: formatting %v: %w", f, err)
			}
			exp = x
			break
		}
	}
	var digits [24]byte
	k := 0
	for _, c := range mant {
		if c != '.' {
			digits[k] = c
			k++
		}
	}
	ds := digits[:k]
	n := exp + 1 // position of the decimal point relative to the digits
	switch {
	case k <= n && n <= 21:
		dst = append(dst, ds...)
		for i := 0; i < n-k; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, ds[:n]...)
		dst = append(dst, '.')
		dst = append(dst, ds[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, ds...)
	default:
		dst = append(dst, ds[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, ds[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}
