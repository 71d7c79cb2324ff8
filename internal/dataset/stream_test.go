package dataset_test

import (
	"fmt"
	"io"
	"iter"
	"runtime"
	"testing"
	"weak"

	"github.com/gyrehq/gyre/internal/dataset"
)

// trackingSource makes each rollout fresh as it is yielded and keeps only
// weak pointers to them, so a test can see whether the writer still holds
// rollouts it has finished with.
type trackingSource struct {
	n     int
	seen  []weak.Pointer[dataset.Rollout]
	check func(i int)
}

func (s *trackingSource) make(i int) *dataset.Rollout {
	r := weatherRollout(fmt.Sprintf("r-%06d", i), fmt.Sprintf("g-%06d", i/2), float64(i%2), fmt.Sprintf("call_%d", i), fmt.Sprintf("answer %d", i))
	s.seen = append(s.seen, weak.Make(r))
	return r
}

func (s *trackingSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for i := range s.n {
			s.check(i)
			if !yield(s.make(i), nil) {
				return
			}
		}
	}
}

func (s *trackingSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		for i := 0; i < s.n; i += 2 {
			s.check(i)
			if !yield([]*dataset.Rollout{s.make(i), s.make(i + 1)}, nil) {
				return
			}
		}
	}
}

// TestWritersKeepNoRolloutTheyHaveWritten: memory does not grow with the
// dataset because a writer lets go of each rollout (dpo: each group) once
// it has written its rows. After a garbage collection, every rollout
// yielded before the previous one (group) must be gone.
func TestWritersKeepNoRolloutTheyHaveWritten(t *testing.T) {
	for _, f := range dataset.Formats {
		t.Run(string(f), func(t *testing.T) {
			src := &trackingSource{n: 400}
			checked := 0
			src.check = func(i int) {
				if i == 0 || i%100 != 0 {
					return
				}
				runtime.GC()
				for j, p := range src.seen[:len(src.seen)-2] {
					if p.Value() != nil {
						t.Fatalf("%s: rollout %d is still reachable when rollout %d is read", f, j, i)
					}
				}
				checked++
			}
			s := sel(f)
			s.Filters.MinReward = ptr(0.0)
			m, err := dataset.Write(io.Discard, s, src)
			if err != nil {
				t.Fatal(err)
			}
			if m.Rows == 0 || checked != 3 {
				t.Fatalf("rows %d, checks %d", m.Rows, checked)
			}
		})
	}
}
