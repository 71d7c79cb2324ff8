package eval

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// tally counts finished runs for a progress display.
type tally struct {
	mu                                  sync.Mutex
	total, done, passed, failed, errors int
	unscored                            int
}

func (t *tally) add(r store.RunRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done++
	switch grade.Classification(r.Classification) {
	case grade.Passed:
		t.passed++
	case grade.Failed:
		t.failed++
	case grade.Unscored:
		t.unscored++
	default:
		t.errors++
	}
}

// line is "done/total, pass rate, errors".
func (t *tally) line() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	rate := "n/a"
	if n := t.passed + t.failed; n > 0 {
		rate = strconv.FormatFloat(100*float64(t.passed)/float64(n), 'f', 1, 64) + "%"
	}
	return fmt.Sprintf("%d/%d runs, pass rate %s, %d errors", t.done, t.total, rate, t.errors)
}

// NewProgress picks the display for w (stderr) given the width of the
// terminal it is, in columns: a bar on a terminal that reports its width,
// plain lines otherwise — when w is not a terminal (columns 0) and when a
// terminal reports zero columns, where a bar would render nothing.
func NewProgress(w io.Writer, columns int, clk clock.Clock) Progress {
	if columns > 0 {
		return NewBarProgress(w)
	}
	return NewLineProgress(w, clk)
}

// BarProgress draws a progress bar on a terminal (stderr): runs done of
// total, pass rate so far, errors, ETA.
type BarProgress struct {
	w   io.Writer
	p   *mpb.Progress
	bar *mpb.Bar
	t   tally
	// last is when the bar last moved, for the ETA's moving average.
	mu   sync.Mutex
	last time.Time
}

// NewBarProgress returns a bar drawing on w, which must be a terminal.
func NewBarProgress(w io.Writer) *BarProgress { return &BarProgress{w: w} }

// Start draws the bar.
func (b *BarProgress) Start(total int) {
	b.t.total = total
	b.last = time.Now()
	b.p = mpb.New(mpb.WithOutput(b.w), mpb.WithAutoRefresh(), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	b.bar = b.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.CountersNoUnit("%d/%d runs", decor.WCSyncWidth)),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string {
				b.t.mu.Lock()
				defer b.t.mu.Unlock()
				rate := "n/a"
				if n := b.t.passed + b.t.failed; n > 0 {
					rate = strconv.FormatFloat(100*float64(b.t.passed)/float64(n), 'f', 1, 64) + "%"
				}
				return fmt.Sprintf(" pass %s  errors %d ", rate, b.t.errors)
			}),
			decor.EwmaETA(decor.ET_STYLE_GO, 30),
		),
	)
}

// Done advances the bar.
func (b *BarProgress) Done(r store.RunRecord) {
	b.t.add(r)
	// mpb's moving-average ETA is not safe for concurrent updates: runs
	// finish on many goroutines, so increments are serialised.
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	d := now.Sub(b.last)
	b.last = now
	b.bar.EwmaIncrement(d)
}

// Warn prints a warning above the bar.
func (b *BarProgress) Warn(msg string) {
	if b.p != nil {
		fmt.Fprintf(b.p, "warning: %s\n", msg)
		return
	}
	fmt.Fprintf(b.w, "warning: %s\n", msg)
}

// Finish completes the bar and waits for it to render.
func (b *BarProgress) Finish() {
	if b.p == nil {
		return
	}
	if !b.bar.Completed() {
		b.bar.Abort(false)
	}
	b.p.Wait()
	b.p = nil
}

// LineProgress prints plain progress lines (for logs and CI): a line for
// every errored run, and a summary line at most every Every or every 5%
// of the runs, whichever comes first, and at the end.
type LineProgress struct {
	w     io.Writer
	clock clock.Clock
	// Every is the longest time between two summary lines (default 5 s).
	Every time.Duration
	mu    sync.Mutex
	t     tally
	last  time.Time
	step  int
}

// NewLineProgress returns a plain progress writer.
func NewLineProgress(w io.Writer, clk clock.Clock) *LineProgress {
	if clk == nil {
		clk = clock.Real{}
	}
	return &LineProgress{w: w, clock: clk, Every: 5 * time.Second}
}

// Start prints the first line.
func (l *LineProgress) Start(total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.total = total
	l.step = max(1, total/20)
	l.last = l.clock.Now()
	fmt.Fprintf(l.w, "running %d runs\n", total)
}

// Done counts a run and prints when a line is due.
func (l *LineProgress) Done(r store.RunRecord) {
	l.t.add(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Classification == string(grade.Errored) {
		fmt.Fprintf(l.w, "error: %s#%d: %s\n", r.CaseID, r.Repetition, r.Error)
	}
	now := l.clock.Now()
	l.t.mu.Lock()
	done, total := l.t.done, l.t.total
	l.t.mu.Unlock()
	if done == total || done%l.step == 0 || now.Sub(l.last) >= l.Every {
		l.last = now
		fmt.Fprintln(l.w, l.t.line())
	}
}

// Warn prints a warning line.
func (l *LineProgress) Warn(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "warning: %s\n", msg)
}

// Finish prints nothing more: the last Done printed the final line.
func (l *LineProgress) Finish() {}
