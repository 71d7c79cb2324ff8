package benchproc

import "testing"

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		in := append([]float64(nil), c.in...)
		if got := Median(in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		if in[0] != c.in[0] {
			t.Errorf("Median reordered its input %v", c.in)
		}
	}
}

func TestPeakRSSMiBReadsProc(t *testing.T) {
	if got := PeakRSSMiB(); got <= 0 {
		t.Errorf("PeakRSSMiB() = %v, want a positive size on Linux", got)
	}
}
