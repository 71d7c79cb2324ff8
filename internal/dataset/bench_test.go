package dataset_test

import (
	"fmt"
	"io"
	"iter"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

// genSource yields n two-completion rollouts (a tool call, then the
// answer: one sft row each) without holding them, as a store cursor would.
type genSource struct {
	n    int
	tmpl [4]*dataset.Rollout
}

func newGenSource(n int) genSource {
	g := genSource{n: n}
	for i := range g.tmpl {
		g.tmpl[i] = weatherRollout("", "", 1, fmt.Sprintf("call_%d", i), fmt.Sprintf("It is %d°C in Paris.", 15+i))
	}
	return g
}

func (g genSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for i := range g.n {
			r := *g.tmpl[i%len(g.tmpl)]
			r.ID = fmt.Sprintf("0193a000-0000-7000-8000-%012d", i)
			r.GroupID = fmt.Sprintf("g-%012d", i/4)
			if !yield(&r, nil) {
				return
			}
		}
	}
}

func (g genSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	panic("not used")
}

// BenchmarkWriteSFT measures the sft writer alone on two-completion
// rollouts: canonical messages, chain detection, the row, its validation,
// hashing.
func BenchmarkWriteSFT(b *testing.B) {
	const perOp = 10_000
	src := newGenSource(perOp)
	b.ReportAllocs()
	rows := 0
	cpu0, haveCPU := processCPU()
	for b.Loop() {
		m, err := dataset.Write(io.Discard, sel(dataset.FormatSFT), src)
		if err != nil {
			b.Fatal(err)
		}
		rows += m.Rows
	}
	cpu1, _ := processCPU()
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	if haveCPU && cpu1 > cpu0 {
		// Rows per second of process CPU (GC included): what one core
		// would write with the machine to itself.
		b.ReportMetric(float64(rows)/(cpu1-cpu0).Seconds(), "rows/cpu-s")
	}
}
