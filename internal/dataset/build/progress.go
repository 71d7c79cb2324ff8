package build

import (
	"bytes"
	"io"
	"iter"
	"sync/atomic"

	"github.com/gyrehq/gyre/internal/dataset"
)

// Progress counts a build's work as it goes, for a progress display: how
// many of the frozen rollouts were read, and how many rows were written.
// It is safe for concurrent use; the zero value is ready.
type Progress struct {
	rollouts, rows atomic.Int64
}

// Rollouts is how many frozen rollouts the build has read so far.
func (p *Progress) Rollouts() int64 { return p.rollouts.Load() }

// Rows is how many rows the build has written so far.
func (p *Progress) Rows() int64 { return p.rows.Load() }

// countingSource counts the rollouts a build reads.
type countingSource struct {
	dataset.Source
	p *Progress
}

func (c countingSource) Rollouts() iter.Seq2[*dataset.Rollout, error] {
	return func(yield func(*dataset.Rollout, error) bool) {
		for r, err := range c.Source.Rollouts() {
			if err == nil {
				c.p.rollouts.Add(1)
			}
			if !yield(r, err) {
				return
			}
		}
	}
}

func (c countingSource) Groups() iter.Seq2[[]*dataset.Rollout, error] {
	return func(yield func([]*dataset.Rollout, error) bool) {
		for g, err := range c.Source.Groups() {
			if err == nil {
				c.p.rollouts.Add(int64(len(g)))
			}
			if !yield(g, err) {
				return
			}
		}
	}
}

// rowCounter counts the rows a build writes: every row ends with the
// file's only newlines (JSON escapes those inside strings).
type rowCounter struct {
	w io.Writer
	p *Progress
}

func (c rowCounter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.rows.Add(int64(bytes.Count(b[:n], []byte{'\n'})))
	return n, err
}
