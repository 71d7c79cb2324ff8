package grade

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Errored is the classification the evaluator gives a run that never
// produced a gradable item: a harness or transport failure, an invalid
// response, a run the harness failed (SPEC §7.2). It is neither a pass nor a
// failure and is left out of every pass-rate denominator.
const Errored Classification = "error"

// Reducer defaults (SPEC §8).
const (
	// DefaultResamples is the number of bootstrap resamples of a mean.
	DefaultResamples = 10_000
	// z95 is the standard normal quantile of a two-sided 95% interval.
	z95 = 1.959963984540054
)

// Sample is one run or rollout of a case as the reducers see it.
type Sample struct {
	// Class is passed, failed, unscored or Errored.
	Class Classification
	// Score is the item's reward (Reward), nil when it has none. A passed
	// or failed outcome without one counts as 1 or 0 in the mean score.
	Score *float64
	// Excluded items (SPEC §4.7) count in no denominator.
	Excluded bool
}

// Interval is a two-sided 95% interval.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// Estimate is a point estimate with its 95% interval over N items.
type Estimate struct {
	Value    float64  `json:"value"`
	Interval Interval `json:"interval"`
	N        int      `json:"n"`
}

// AtK is pass@k and pass^k for one k.
type AtK struct {
	K int `json:"k"`
	// PassAt is the unbiased pass@k estimator of Chen et al. (2021): the
	// probability that at least one of k draws without replacement from
	// the n scored items passed.
	PassAt float64 `json:"pass_at_k"`
	// PassHat is pass^k (Yao et al., 2024): the probability that all k
	// draws passed, C(c,k)/C(n,k).
	PassHat float64 `json:"pass_hat_k"`
}

// Reduction summarises the samples of one case (or of any group). Counts
// add up: N = Passed + Failed + Unscored + Errors + Excluded.
type Reduction struct {
	N        int `json:"n"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Unscored int `json:"unscored"`
	Errors   int `json:"errors"`
	Excluded int `json:"excluded"`
	// PassRate is Passed/(Passed+Failed) with a Wilson interval; nil when
	// nothing was scored.
	PassRate *Estimate `json:"pass_rate"`
	// MeanScore is the mean score of the scored items with a percentile
	// bootstrap interval; nil when nothing was scored.
	MeanScore *Estimate `json:"mean_score"`
	// AtK holds pass@k and pass^k for each requested k no larger than the
	// number of scored items.
	AtK []AtK `json:"at_k"`
	// Seed and Resamples reproduce the bootstrap interval.
	Seed      uint64 `json:"seed"`
	Resamples int    `json:"resamples"`
}

// ReduceOptions tune Reduce.
type ReduceOptions struct {
	// Ks are the k values of pass@k and pass^k; each must be ≥ 1.
	Ks []int
	// Seed seeds the bootstrap; record it to reproduce the interval.
	Seed uint64
	// Resamples is the number of bootstrap resamples; 0 means
	// DefaultResamples.
	Resamples int
	// Memo, when set, remembers bootstrap intervals across the Reduce
	// calls that share it (the cases of one report).
	Memo *BootstrapMemo
}

// Reduce summarises samples (SPEC §8): counts, pass rate with a Wilson
// interval, mean score with a bootstrap interval, pass@k and pass^k.
// Unscored (all graders abstained), errored and excluded outcomes are out
// of every denominator.
func Reduce(samples []Sample, opts ReduceOptions) Reduction {
	if opts.Resamples <= 0 {
		opts.Resamples = DefaultResamples
	}
	r := Reduction{N: len(samples), Seed: opts.Seed, Resamples: opts.Resamples}
	var scores []float64
	for _, o := range samples {
		if o.Excluded {
			r.Excluded++
			continue
		}
		switch o.Class {
		case Passed:
			r.Passed++
		case Failed:
			r.Failed++
		case Unscored:
			r.Unscored++
			continue
		default:
			r.Errors++
			continue
		}
		s := 0.0
		switch {
		case o.Score != nil && !math.IsNaN(*o.Score):
			s = math.Max(0, math.Min(1, *o.Score))
		case o.Class == Passed:
			s = 1
		}
		scores = append(scores, s)
	}
	n := r.Passed + r.Failed
	if n > 0 {
		lo, hi := Wilson(r.Passed, n)
		r.PassRate = &Estimate{Value: float64(r.Passed) / float64(n), Interval: Interval{lo, hi}, N: n}
		lo, hi = opts.Memo.BootstrapMean(scores, opts.Resamples, opts.Seed)
		r.MeanScore = &Estimate{Value: mean(scores), Interval: Interval{lo, hi}, N: len(scores)}
	}
	for _, k := range opts.Ks {
		if k < 1 || k > n {
			continue
		}
		r.AtK = append(r.AtK, AtK{K: k, PassAt: PassAtK(n, r.Passed, k), PassHat: PassHatK(n, r.Passed, k)})
	}
	return r
}

// Wilson returns the 95% Wilson score interval of a rate of successes out
// of n trials. n == 0 gives the uninformative [0, 1].
func Wilson(successes, n int) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	p := float64(successes) / float64(n)
	nf := float64(n)
	z2 := z95 * z95
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z95 / denom * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return math.Max(0, center-half), math.Min(1, center+half)
}

// PassAtK is the unbiased pass@k estimator of Chen et al. (2021),
// 1 - C(n-c, k)/C(n, k), for c passes among n samples, computed as a
// product so that it stays exact for large n. It is NaN unless
// 0 ≤ c ≤ n and 1 ≤ k ≤ n.
func PassAtK(n, c, k int) float64 {
	if n < 1 || k < 1 || k > n || c < 0 || c > n {
		return math.NaN()
	}
	if n-c < k {
		return 1
	}
	prod := 1.0
	for i := n - c + 1; i <= n; i++ {
		prod *= 1 - float64(k)/float64(i)
	}
	return 1 - prod
}

// PassHatK is pass^k, C(c, k)/C(n, k): the probability that k samples
// drawn without replacement from n, of which c passed, all passed. It is
// NaN unless 0 ≤ c ≤ n and 1 ≤ k ≤ n.
func PassHatK(n, c, k int) float64 {
	if n < 1 || k < 1 || k > n || c < 0 || c > n {
		return math.NaN()
	}
	if c < k {
		return 0
	}
	prod := 1.0
	for i := range k {
		prod *= float64(c-i) / float64(n-i)
	}
	return prod
}

// BootstrapMean returns the 95% percentile bootstrap interval of the mean
// of values, from resamples resamples drawn with a PCG generator seeded by
// seed: the same inputs always give the same interval. No values give
// NaN bounds; one value gives [v, v].
func BootstrapMean(values []float64, resamples int, seed uint64) (low, high float64) {
	switch len(values) {
	case 0:
		return math.NaN(), math.NaN()
	case 1:
		return values[0], values[0]
	}
	if resamples <= 0 {
		resamples = DefaultResamples
	}
	n := len(values)
	if v, ok := allSame(values); ok {
		// Every resample is n copies of v: they share one mean, whatever
		// the draws, so none is drawn.
		sum := 0.0
		for range n {
			sum += v
		}
		m := sum / float64(n)
		return m, m
	}
	src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	buf := meansPool.Get().(*[]float64)
	defer meansPool.Put(buf)
	means := slices.Grow((*buf)[:0], resamples)[:resamples]
	*buf = means
	for r := range means {
		sum := 0.0
		for range n {
			sum += values[drawIndex(src, n)]
		}
		means[r] = sum / float64(n)
	}
	return quantilePair(means, 0.025, 0.975)
}

// PairedBootstrapMeanDiff returns the mean of b[i]-a[i] and its 95%
// percentile bootstrap interval, resampling the pairs together (so that
// per-pair correlation is kept). a and b must have the same length.
func PairedBootstrapMeanDiff(a, b []float64, resamples int, seed uint64) (diff float64, low, high float64) {
	if len(a) != len(b) {
		panic("grade: paired bootstrap of unequal lengths")
	}
	d := make([]float64, len(a))
	for i := range a {
		d[i] = b[i] - a[i]
	}
	if len(d) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	low, high = BootstrapMean(d, resamples, seed)
	return mean(d), low, high
}

// quantile is the linear-interpolation quantile q of sorted values.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(math.Floor(pos))
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(i)
	return sorted[i] + frac*(sorted[i+1]-sorted[i])
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
