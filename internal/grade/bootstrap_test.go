package grade

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// bootstrapMeanBySort is BootstrapMean as first written: rand.Rand.IntN
// and a full sort of the resample means. The faster one must give
// exactly its numbers, so that a report or comparison computed again
// matches the one stored.
func bootstrapMeanBySort(values []float64, resamples int, seed uint64) (low, high float64) {
	switch len(values) {
	case 0:
		return math.NaN(), math.NaN()
	case 1:
		return values[0], values[0]
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	means := make([]float64, resamples)
	n := len(values)
	for r := range means {
		sum := 0.0
		for range n {
			sum += values[rng.IntN(n)]
		}
		means[r] = sum / float64(n)
	}
	slices.Sort(means)
	return quantile(means, 0.025), quantile(means, 0.975)
}

func sameFloat(a, b float64) bool {
	return a == b && math.Signbit(a) == math.Signbit(b) || math.IsNaN(a) && math.IsNaN(b)
}

func TestDrawIndexIsRandIntN(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 5, 7, 8, 10, 64, 100, 1000, 1023, 1 << 20, 3<<40 + 1, math.MaxInt64} {
		for seed := range uint64(5) {
			ref := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
			for i := range 2000 {
				if want, got := ref.IntN(n), drawIndex(src, n); got != want {
					t.Fatalf("n=%d seed=%d draw %d: drawIndex = %d, rand.IntN = %d", n, seed, i, got, want)
				}
			}
		}
	}
}

func TestBootstrapMeanGivesTheNumbersOfAFullSort(t *testing.T) {
	t.Parallel()
	gen := rand.New(rand.NewPCG(11, 12))
	inputs := [][]float64{
		{0, 1}, {1, 1, 1, 1, 0}, {0, 0, 0, 0, 1}, {1, 0, 1, 0, 1}, {0.25, 0.25, 0.25}, {0.1, 0.1, 0.1},
		{1, 1}, {0, 0, 0}, {-0.0, 0, 0}, {0.3, 0.7}, {math.Inf(1), 1}, {math.Inf(1), math.Inf(1)},
		{math.NaN(), 1, 0}, {math.NaN(), math.NaN()}, {-0.5, 0.5, -0.5, 0.5, 1},
	}
	for range 40 {
		n := 2 + gen.IntN(40)
		v := make([]float64, n)
		for i := range v {
			switch gen.IntN(3) {
			case 0:
				v[i] = float64(gen.IntN(2))
			case 1:
				v[i] = gen.Float64()*2 - 1
			default:
				v[i] = float64(gen.IntN(5)) / 5
			}
		}
		inputs = append(inputs, v)
	}
	big := make([]float64, 1000)
	for i := range big {
		big[i] = float64(gen.IntN(3)-1) / float64(1+gen.IntN(4))
	}
	inputs = append(inputs, big)
	for i, v := range inputs {
		for _, resamples := range []int{1, 2, 3, 10, 101, 1000, DefaultResamples} {
			if len(v) == 1000 && resamples != DefaultResamples {
				continue
			}
			for _, seed := range []uint64{0, 1, 7, 42} {
				wlo, whi := bootstrapMeanBySort(slices.Clone(v), resamples, seed)
				glo, ghi := BootstrapMean(slices.Clone(v), resamples, seed)
				if !sameFloat(glo, wlo) || !sameFloat(ghi, whi) {
					t.Fatalf("input %d %v, %d resamples, seed %d: BootstrapMean = [%v, %v], a full sort gives [%v, %v]",
						i, v, resamples, seed, glo, ghi, wlo, whi)
				}
			}
		}
	}
}

func TestQuantilePairIsTheQuantilesOfTheSortedValues(t *testing.T) {
	t.Parallel()
	gen := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		n := 1 + gen.IntN(300)
		v := make([]float64, n)
		distinct := 1 + gen.IntN(6)
		for i := range v {
			v[i] = float64(gen.IntN(distinct))
			if gen.IntN(10) == 0 {
				v[i] = gen.NormFloat64()
			}
		}
		q1 := gen.Float64()
		q2 := q1 + (1-q1)*gen.Float64()
		sorted := slices.Sorted(slices.Values(v))
		w1, w2 := quantile(sorted, q1), quantile(sorted, q2)
		g1, g2 := quantilePair(slices.Clone(v), q1, q2)
		if !sameFloat(g1, w1) || !sameFloat(g2, w2) {
			t.Fatalf("%v at %v, %v: quantilePair = %v, %v; sorted quantiles %v, %v", v, q1, q2, g1, g2, w1, w2)
		}
	}
}

func BenchmarkBootstrapMeanFiveRuns(b *testing.B) {
	v := []float64{1, 0, 1, 1, 0}
	for b.Loop() {
		BootstrapMean(v, DefaultResamples, 7)
	}
}

func BenchmarkBootstrapMeanFiveRunsBySort(b *testing.B) {
	v := []float64{1, 0, 1, 1, 0}
	for b.Loop() {
		bootstrapMeanBySort(v, DefaultResamples, 7)
	}
}

func TestBootstrapMemoGivesBootstrapMeanPerSeedAndResamples(t *testing.T) {
	t.Parallel()
	var memo BootstrapMemo
	inputs := [][]float64{{1, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 0, 1, 1}, {0.5, 0.5}, {0.5, -0.0}, {0.5, 0}, {1}, nil}
	for round := range 2 {
		for _, v := range inputs {
			for _, seed := range []uint64{1, 2} {
				for _, resamples := range []int{50, 5000} {
					wlo, whi := BootstrapMean(v, resamples, seed)
					glo, ghi := memo.BootstrapMean(v, resamples, seed)
					if !sameFloat(glo, wlo) || !sameFloat(ghi, whi) {
						t.Fatalf("round %d, %v, seed %d, %d resamples: memo = [%v, %v], BootstrapMean = [%v, %v]",
							round, v, seed, resamples, glo, ghi, wlo, whi)
					}
				}
			}
		}
	}
	var none *BootstrapMemo
	if lo, hi := none.BootstrapMean([]float64{1, 0}, 100, 3); lo != 0 || hi != 1 {
		t.Errorf("nil memo: [%v, %v], want [0, 1]", lo, hi)
	}
}
