package grade

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
)

// The bootstrap draws millions of indices per report (10,000 resamples of
// every case), so it reads its generator directly and selects the two
// quantiles instead of sorting every resample mean. Both give exactly the
// numbers of rand.Rand.IntN and a full sort: the tests compare them.

// drawIndex is rand.New(src).IntN(n) for n ≥ 1 on a 64-bit platform, the
// same draw from the same stream (Lemire's multiply-and-reject, as
// math/rand/v2 does it), without the interface call per draw.
func drawIndex(src *rand.PCG, n int) int {
	if bits.UintSize == 32 {
		return rand.New(src).IntN(n) // math/rand/v2 draws differently there
	}
	un := uint64(n)
	if un&(un-1) == 0 { // a power of two: mask
		return int(src.Uint64() & (un - 1))
	}
	hi, lo := bits.Mul64(src.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), un)
		}
	}
	return int(hi)
}

// meansPool keeps the resample means' buffers: a report bootstraps every
// case, and each would otherwise allocate resamples floats.
var meansPool = sync.Pool{New: func() any { return new([]float64) }}

// allSame reports whether every value is the same finite number.
func allSame(values []float64) (float64, bool) {
	v := values[0]
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	for _, x := range values[1:] {
		if x != v || math.Signbit(x) != math.Signbit(v) {
			return 0, false
		}
	}
	return v, true
}

// quantilePair is quantile(sorted, q1) and quantile(sorted, q2), q1 ≤ q2,
// of values as slices.Sort would order them; it reorders values. It
// selects the four order statistics the two quantiles read rather than
// sorting everything.
func quantilePair(values []float64, q1, q2 float64) (float64, float64) {
	if slices.ContainsFunc(values, math.IsNaN) {
		// slices.Sort puts NaNs first; the selection below assumes a
		// total order.
		slices.Sort(values)
		return quantile(values, q1), quantile(values, q2)
	}
	last := len(values) - 1
	pos1, pos2 := q1*float64(last), q2*float64(last)
	i, j := int(math.Floor(pos1)), int(math.Floor(pos2))
	// stat returns the k-th smallest value; order statistics are asked
	// for in increasing k, and each selection leaves everything after
	// position k no smaller than it.
	done := 0
	stat := func(k int) float64 {
		k = min(k, last)
		if k < done {
			panic("grade: order statistics asked for out of order")
		}
		v := selectKth(values[done:], k-done)
		done = k
		return v
	}
	interp := func(pos float64, i int) float64 {
		if i >= last {
			return stat(last)
		}
		lo := stat(i)
		hi := minOf(values[i+1:])
		return lo + (pos-float64(i))*(hi-lo)
	}
	return interp(pos1, i), interp(pos2, j)
}

// minOf is the smallest of values (none NaN), len(values) ≥ 1.
func minOf(values []float64) float64 {
	m := values[0]
	for _, v := range values[1:] {
		if v < m {
			m = v
		}
	}
	return m
}

// selectKth reorders a (no NaN) so that a[k] holds its k-th smallest
// value (0-based), everything before it no larger and everything after
// it no smaller, and returns it. It partitions three ways around a
// median-of-three pivot, so the many equal means of a small sample cost
// one pass; a range that stops shrinking fast enough is sorted instead.
func selectKth(a []float64, k int) float64 {
	lo, hi := 0, len(a)
	for rounds := 0; hi-lo > 1; rounds++ {
		if rounds > 64 {
			slices.Sort(a[lo:hi])
			return a[k]
		}
		p := median3(a[lo], a[lo+(hi-lo)/2], a[hi-1])
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch x := a[i]; {
			case x < p:
				a[lt], a[i] = x, a[lt]
				lt++
				i++
			case x > p:
				gt--
				a[i], a[gt] = a[gt], x
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k >= gt:
			lo = gt
		default:
			return a[k]
		}
	}
	return a[k]
}

func median3(a, b, c float64) float64 {
	if a > b {
		a, b = b, a
	}
	if b > c {
		b = c
	}
	return max(a, b)
}

// BootstrapMemo remembers the intervals BootstrapMean gave: the interval
// is a function of the values in order, the resamples and the seed, and
// the cases of a report share few score sequences (five binary runs have
// 32), so a report bootstraps each sequence once. The zero value is
// ready; it is not safe for concurrent use.
type BootstrapMemo struct {
	m   map[string][2]float64
	key []byte
}

// maxMemoized bounds a memo's entries; past it, intervals are computed
// and not kept.
const maxMemoized = 1 << 16

// BootstrapMean is BootstrapMean(values, resamples, seed), computed once
// per distinct arguments. A nil memo remembers nothing.
func (m *BootstrapMemo) BootstrapMean(values []float64, resamples int, seed uint64) (low, high float64) {
	if m == nil || len(values) < 2 {
		return BootstrapMean(values, resamples, seed)
	}
	k := binary.LittleEndian.AppendUint64(m.key[:0], seed)
	k = binary.LittleEndian.AppendUint64(k, uint64(resamples))
	for _, v := range values {
		k = binary.LittleEndian.AppendUint64(k, math.Float64bits(v))
	}
	m.key = k
	if iv, ok := m.m[string(k)]; ok {
		return iv[0], iv[1]
	}
	low, high = BootstrapMean(values, resamples, seed)
	if m.m == nil {
		m.m = map[string][2]float64{}
	}
	if len(m.m) < maxMemoized {
		m.m[string(k)] = [2]float64{low, high}
	}
	return low, high
}
