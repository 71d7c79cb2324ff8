package grade

import (
	"math"
	"math/big"
	"testing"
)

// exactPassAtK computes 1 - C(n-c,k)/C(n,k) with exact rationals.
func exactPassAtK(n, c, k int) float64 {
	num := new(big.Int).Binomial(int64(n-c), int64(k))
	if n-c < k {
		num = big.NewInt(0)
	}
	den := new(big.Int).Binomial(int64(n), int64(k))
	r := new(big.Rat).SetFrac(num, den)
	f, _ := new(big.Rat).Sub(big.NewRat(1, 1), r).Float64()
	return f
}

// exactPassHatK computes C(c,k)/C(n,k) with exact rationals.
func exactPassHatK(n, c, k int) float64 {
	if c < k {
		return 0
	}
	r := new(big.Rat).SetFrac(new(big.Int).Binomial(int64(c), int64(k)), new(big.Int).Binomial(int64(n), int64(k)))
	f, _ := r.Float64()
	return f
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestPassAtK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, c, k int
		want    float64
	}{
		{10, 3, 1, 0.3},
		{10, 3, 5, 1 - 21.0/252.0}, // 1 - C(7,5)/C(10,5)
		{10, 0, 5, 0},
		{10, 10, 1, 1},
		{5, 4, 2, 1}, // n-c < k: every pair holds a pass
		{1, 1, 1, 1},
		{1, 0, 1, 0},
		{4, 2, 2, 1 - 1.0/6.0}, // 1 - C(2,2)/C(4,2)
	}
	for _, tt := range tests {
		if got := PassAtK(tt.n, tt.c, tt.k); !near(got, tt.want, 1e-12) {
			t.Errorf("PassAtK(%d,%d,%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.want)
		}
	}
	// Against exact rationals, including large n where naive binomials
	// overflow a float64.
	for _, tt := range [][3]int{{200, 10, 100}, {200, 1, 1}, {200, 150, 10}, {1000, 3, 500}, {50, 25, 25}} {
		n, c, k := tt[0], tt[1], tt[2]
		if got, want := PassAtK(n, c, k), exactPassAtK(n, c, k); !near(got, want, 1e-9) {
			t.Errorf("PassAtK(%d,%d,%d) = %v, exact %v", n, c, k, got, want)
		}
	}
	for _, bad := range [][3]int{{0, 0, 1}, {5, 6, 1}, {5, 2, 0}, {5, 2, 6}, {5, -1, 1}} {
		if got := PassAtK(bad[0], bad[1], bad[2]); !math.IsNaN(got) {
			t.Errorf("PassAtK%v = %v, want NaN", bad, got)
		}
	}
}

func TestPassHatK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, c, k int
		want    float64
	}{
		{10, 3, 2, 3.0 / 45.0},
		{10, 3, 1, 0.3},
		{10, 3, 4, 0},
		{5, 5, 5, 1},
		{4, 2, 2, 1.0 / 6.0},
	}
	for _, tt := range tests {
		if got := PassHatK(tt.n, tt.c, tt.k); !near(got, tt.want, 1e-12) {
			t.Errorf("PassHatK(%d,%d,%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.want)
		}
	}
	for _, tt := range [][3]int{{200, 190, 50}, {1000, 999, 500}, {30, 15, 3}} {
		n, c, k := tt[0], tt[1], tt[2]
		if got, want := PassHatK(n, c, k), exactPassHatK(n, c, k); !near(got, want, 1e-12) {
			t.Errorf("PassHatK(%d,%d,%d) = %v, exact %v", n, c, k, got, want)
		}
	}
	// pass^1 equals pass@1 equals the pass rate.
	if a, b := PassHatK(7, 4, 1), PassAtK(7, 4, 1); !near(a, b, 1e-15) || !near(a, 4.0/7.0, 1e-15) {
		t.Errorf("pass^1 = %v, pass@1 = %v, want both 4/7", a, b)
	}
}

func TestWilson(t *testing.T) {
	t.Parallel()
	// Reference values: the Wilson score interval at z = 1.96 (as in
	// statsmodels' proportion_confint(method="wilson")).
	tests := []struct {
		k, n     int
		lo, hi   float64
		describe string
	}{
		{8, 10, 0.4901625, 0.9433178, "8/10"},
		{0, 10, 0, 0.2775328, "0/10"},
		{10, 10, 0.7224672, 1, "10/10"},
		{1, 2, 0.0945312, 0.9054688, "1/2"},
		{50, 100, 0.4038315, 0.5961685, "50/100"},
		{1, 1, 0.2065493, 1, "1/1"},
	}
	for _, tt := range tests {
		lo, hi := Wilson(tt.k, tt.n)
		if !near(lo, tt.lo, 1e-6) || !near(hi, tt.hi, 1e-6) {
			t.Errorf("Wilson(%s) = [%.7f, %.7f], want [%.7f, %.7f]", tt.describe, lo, hi, tt.lo, tt.hi)
		}
		if p := float64(tt.k) / float64(tt.n); lo > p || hi < p {
			t.Errorf("Wilson(%s) = [%v, %v] does not contain %v", tt.describe, lo, hi, p)
		}
	}
	if lo, hi := Wilson(0, 0); lo != 0 || hi != 1 {
		t.Errorf("Wilson(0,0) = [%v,%v], want [0,1]", lo, hi)
	}
}

func TestBootstrapMean(t *testing.T) {
	t.Parallel()
	vals := []float64{0, 1, 1, 0, 1, 1, 1, 0, 1, 1}
	lo1, hi1 := BootstrapMean(vals, 10_000, 42)
	lo2, hi2 := BootstrapMean(vals, 10_000, 42)
	if lo1 != lo2 || hi1 != hi2 {
		t.Fatalf("same seed gave [%v,%v] then [%v,%v]", lo1, hi1, lo2, hi2)
	}
	if m := mean(vals); lo1 > m || hi1 < m || lo1 < 0 || hi1 > 1 || lo1 >= hi1 {
		t.Errorf("interval [%v,%v] is not a proper interval around %v", lo1, hi1, m)
	}
	// The percentile interval of a 0/1 mean of n=10 at p=0.7 is about
	// [0.4, 1.0]; a different seed moves it little.
	lo3, hi3 := BootstrapMean(vals, 10_000, 7)
	if !near(lo1, lo3, 0.11) || !near(hi1, hi3, 0.11) || !near(lo1, 0.4, 0.11) || !near(hi1, 1.0, 0.11) {
		t.Errorf("intervals [%v,%v] (seed 42) and [%v,%v] (seed 7), want about [0.4, 1.0]", lo1, hi1, lo3, hi3)
	}
	if lo, hi := BootstrapMean([]float64{0.25, 0.25, 0.25}, 100, 1); lo != 0.25 || hi != 0.25 {
		t.Errorf("constant values: [%v,%v], want [0.25,0.25]", lo, hi)
	}
	if lo, hi := BootstrapMean([]float64{0.3}, 100, 1); lo != 0.3 || hi != 0.3 {
		t.Errorf("one value: [%v,%v], want [0.3,0.3]", lo, hi)
	}
	if lo, hi := BootstrapMean(nil, 100, 1); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("no values: [%v,%v], want NaN", lo, hi)
	}
}

func TestPairedBootstrapMeanDiff(t *testing.T) {
	t.Parallel()
	a := []float64{1, 1, 1, 0.5, 1, 1}
	b := []float64{0, 0, 0, 0.5, 0, 0}
	d, lo, hi := PairedBootstrapMeanDiff(a, b, 10_000, 3)
	if !near(d, -5.0/6.0, 1e-12) || hi >= 0 || lo > d || hi < d {
		t.Errorf("diff %v [%v,%v], want -5/6 inside an interval below 0", d, lo, hi)
	}
	d, lo, hi = PairedBootstrapMeanDiff(a, a, 100, 3)
	if d != 0 || lo != 0 || hi != 0 {
		t.Errorf("identical: %v [%v,%v], want 0 [0,0]", d, lo, hi)
	}
}

func TestReduce(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	samples := []Sample{
		{Class: Passed, Score: f(1)},
		{Class: Passed}, // counts 1
		{Class: Failed, Score: f(0.5)},
		{Class: Failed},   // counts 0 (a timed-out run has no reward)
		{Class: Unscored}, // out of every denominator
		{Class: Errored},  // out of every denominator
		{Class: Passed, Excluded: true},
	}
	r := Reduce(samples, ReduceOptions{Ks: []int{1, 2, 5}, Seed: 9})
	if r.N != 7 || r.Passed != 2 || r.Failed != 2 || r.Unscored != 1 || r.Errors != 1 || r.Excluded != 1 {
		t.Fatalf("counts = %+v", r)
	}
	if r.PassRate == nil || r.PassRate.Value != 0.5 || r.PassRate.N != 4 {
		t.Fatalf("pass rate = %+v, want 0.5 over 4", r.PassRate)
	}
	if lo, hi := Wilson(2, 4); r.PassRate.Interval != (Interval{lo, hi}) {
		t.Errorf("pass rate interval = %+v, want Wilson(2,4)", r.PassRate.Interval)
	}
	if r.MeanScore == nil || !near(r.MeanScore.Value, 2.5/4, 1e-12) || r.MeanScore.N != 4 {
		t.Errorf("mean score = %+v, want 0.625 over 4", r.MeanScore)
	}
	if r.Seed != 9 || r.Resamples != DefaultResamples {
		t.Errorf("seed/resamples = %d/%d", r.Seed, r.Resamples)
	}
	// k=5 > 4 scored items is left out.
	if len(r.AtK) != 2 || r.AtK[0].K != 1 || r.AtK[1].K != 2 {
		t.Fatalf("at_k = %+v, want k=1 and k=2", r.AtK)
	}
	if r.AtK[1].PassAt != PassAtK(4, 2, 2) || r.AtK[1].PassHat != PassHatK(4, 2, 2) {
		t.Errorf("at k=2: %+v", r.AtK[1])
	}

	empty := Reduce([]Sample{{Class: Unscored}, {Class: Errored}}, ReduceOptions{Ks: []int{1}})
	if empty.PassRate != nil || empty.MeanScore != nil || len(empty.AtK) != 0 {
		t.Errorf("nothing scored: %+v, want no rates", empty)
	}
}
