package ui

import (
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, ms(i))
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   *time.Duration
	}{
		{"none", nil, 50, nil},
		{"one", []time.Duration{ms(7)}, 99, ptr(ms(7))},
		{"p50 of two is the first", []time.Duration{ms(1), ms(9)}, 50, ptr(ms(1))},
		{"p99 of two is the last", []time.Duration{ms(1), ms(9)}, 99, ptr(ms(9))},
		{"p50 of 1..100", hundred, 50, ptr(ms(50))},
		{"p99 of 1..100", hundred, 99, ptr(ms(99))},
	} {
		got := percentile(tc.sorted, tc.p)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: percentile = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
