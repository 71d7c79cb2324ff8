package cli

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/gyrehq/gyre/internal/dataset/build"
)

// buildBar shows a dataset build's progress on stderr: rollouts read of
// those selected, and rows written. It draws only when stderr is a
// terminal that reports its width; otherwise (piped, redirected, a
// terminal of 0 columns) it draws nothing, and its methods do nothing. A
// nil *buildBar is such a silent one.
type buildBar struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	total int64
	rows  atomic.Int64
}

// newBuildBar starts a bar for a build of total rollouts on w.
func newBuildBar(w io.Writer, total int) *buildBar {
	if terminalColumns(w) <= 0 || total <= 0 {
		return nil
	}
	b := &buildBar{total: int64(total)}
	b.p = mpb.New(mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	b.bar = b.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.CountersNoUnit("%d/%d rollouts", decor.WCSyncWidth)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			return fmt.Sprintf(" %d rows", b.rows.Load())
		})),
	)
	return b
}

// set moves the bar to rollouts read and rows written. The bar completes
// only in finish, so that its last drawing has the final row count.
func (b *buildBar) set(rollouts, rows int64) {
	if b == nil {
		return
	}
	b.rows.Store(rows)
	b.bar.SetCurrent(min(rollouts, b.total-1))
}

// follow moves the bar with p until the returned stop is called.
func (b *buildBar) follow(p *build.Progress) (stop func()) {
	if b == nil {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			b.set(p.Rollouts(), p.Rows())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-ended
		b.set(p.Rollouts(), p.Rows())
	}
}

// finish completes the bar (ok) or leaves it where it stopped, and waits
// for its last drawing.
func (b *buildBar) finish(ok bool) {
	if b == nil {
		return
	}
	if ok {
		b.bar.SetCurrent(b.total)
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}
