package flywheel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of AttachConfig.
const (
	DefaultQueueSize     = 1024
	DefaultFlushInterval = time.Second
	DefaultMaxRetryTime  = 2 * time.Minute
	// MaxTurnsPerBatch is the contract's cap on a ProductionTurnBatch.
	MaxTurnsPerBatch = 64
)

// AttachConfig configures Attach. Zero fields take their defaults.
type AttachConfig struct {
	// Client sends the batches. Required.
	Client *Client
	// AgentID is the agent the turns belong to. Required.
	AgentID string
	// QueueSize bounds the turns waiting to be sent (default 1024). A turn
	// that finds the queue full is dropped and counted.
	QueueSize int
	// BatchSize caps the turns per POST /turns (1–64, default 64).
	BatchSize int
	// FlushInterval is the longest a queued turn waits for its batch to
	// fill (default 1 s).
	FlushInterval time.Duration
	// MaxRetryTime is how long a batch is retried after 429, 5xx or
	// transport errors before it is dropped and counted failed (default
	// 2 min).
	MaxRetryTime time.Duration
	// RetryBase is the first retry delay (default 200 ms), doubling up to
	// 10 s, with jitter; a Retry-After from the server wins when longer.
	RetryBase time.Duration
	// Logger receives warnings about dropped and rejected turns; nil
	// discards them.
	Logger *slog.Logger
}

// Errors of Capture.Add.
var (
	// ErrQueueFull: the turn was dropped because the queue is full.
	ErrQueueFull = errors.New("flywheel: capture queue full; turn dropped")
	// ErrCaptureClosed: the turn was dropped because Close was called.
	ErrCaptureClosed = errors.New("flywheel: capture closed; turn dropped")
)

// CaptureStats counts what happened to the turns given to a Capture. Every
// turn Add accepted (Queued) ends in exactly one of Accepted, Duplicates,
// Rejected or Failed, or is still pending.
type CaptureStats struct {
	// Queued counts turns accepted into the queue.
	Queued int64
	// Accepted and Duplicates are the server's counts for sent turns.
	Accepted, Duplicates int64
	// Dropped counts turns refused because the queue was full or closed.
	Dropped int64
	// Invalid counts turns refused because they break the contract.
	Invalid int64
	// Rejected counts turns the server refused on their own (409 or 422
	// after the batch was split to isolate them).
	Rejected int64
	// Failed counts turns given up on after retries, or refused with the
	// whole batch (401, 403).
	Failed int64
}

// Pending is the number of queued turns not yet settled.
func (s CaptureStats) Pending() int64 {
	return s.Queued - s.Accepted - s.Duplicates - s.Rejected - s.Failed
}

// Capture is production capture started by Attach: it sends the turns an
// agent hands it to POST /turns in the background.
type Capture struct {
	cfg   AttachConfig
	log   *slog.Logger
	queue chan ProductionTurn

	mu     sync.RWMutex
	closed bool

	closing chan struct{}
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	queued, accepted, duplicates, dropped, invalid, rejected, failed atomic.Int64
	droppedLogged                                                    atomic.Int64
}

// Attach starts production capture (SPEC §5): turns handed to Add are
// validated against the contract, queued in a bounded in-memory queue and
// sent in batches of up to 64 to POST /turns. Add never blocks the agent:
// a full queue drops the turn and counts it. Batches are retried on 429,
// 5xx and transport errors with backoff; a batch the server refuses with
// 409 or 422 is split to isolate the turn at fault, so one bad turn never
// poisons the others. Close flushes what is queued.
func Attach(cfg AttachConfig) (*Capture, error) {
	if cfg.Client == nil {
		return nil, errors.New("flywheel: attach needs a client")
	}
	if err := ValidateAgentID(cfg.AgentID); err != nil {
		return nil, fmt.Errorf("flywheel: agent id: %w", err)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = MaxTurnsPerBatch
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MaxRetryTime == 0 {
		cfg.MaxRetryTime = DefaultMaxRetryTime
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 200 * time.Millisecond
	}
	switch {
	case cfg.QueueSize < 0:
		return nil, fmt.Errorf("flywheel: queue size must be positive, not %d", cfg.QueueSize)
	case cfg.BatchSize < 1 || cfg.BatchSize > MaxTurnsPerBatch:
		return nil, fmt.Errorf("flywheel: batch size must be 1 to %d, not %d", MaxTurnsPerBatch, cfg.BatchSize)
	case cfg.FlushInterval < 0 || cfg.MaxRetryTime < 0 || cfg.RetryBase < 0:
		return nil, errors.New("flywheel: attach durations must be positive")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Capture{
		cfg: cfg, log: log, queue: make(chan ProductionTurn, cfg.QueueSize),
		closing: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	go c.run()
	return c, nil
}

// Add hands a turn to the capture and returns its turn_id: t.TurnID, or a
// fresh one (NewTurnID) when it is empty — minted once, so retries of its
// batch repeat it. It never blocks: a turn that breaks the contract is
// refused with a *ValidationError, one that finds the queue full with
// ErrQueueFull, one after Close with ErrCaptureClosed; each is counted.
func (c *Capture) Add(t ProductionTurn) (string, error) {
	if t.TurnID == "" {
		t.TurnID = NewTurnID()
	}
	if err := ValidateValue(DefProductionTurn, t); err != nil {
		c.invalid.Add(1)
		return t.TurnID, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.dropped.Add(1)
		return t.TurnID, ErrCaptureClosed
	}
	select {
	case c.queue <- t:
		c.queued.Add(1)
		return t.TurnID, nil
	default:
		c.dropped.Add(1)
		return t.TurnID, ErrQueueFull
	}
}

// Stats returns the counts so far.
func (c *Capture) Stats() CaptureStats {
	return CaptureStats{
		Queued: c.queued.Load(), Accepted: c.accepted.Load(), Duplicates: c.duplicates.Load(),
		Dropped: c.dropped.Load(), Invalid: c.invalid.Load(), Rejected: c.rejected.Load(), Failed: c.failed.Load(),
	}
}

// Close stops accepting turns and sends every queued one, retrying as
// usual, until done or ctx ends; then it gives up on what is left (counted
// failed) and returns ctx's error. Calling Close again waits the same way.
func (c *Capture) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.cancel()
		<-c.done
		return fmt.Errorf("flywheel: capture close: %w", ctx.Err())
	}
}

// run batches queued turns until Close, then flushes.
func (c *Capture) run() {
	defer close(c.done)
	defer c.cancel()
	var batch []ProductionTurn
	var timer *time.Timer
	var tick <-chan time.Time
	flush := func() {
		if timer != nil {
			timer.Stop()
			timer, tick = nil, nil
		}
		if len(batch) > 0 {
			c.send(batch)
			batch = nil
		}
	}
	for {
		select {
		case t := <-c.queue:
			batch = append(batch, t)
			if len(batch) >= c.cfg.BatchSize {
				flush()
			} else if timer == nil {
				timer = time.NewTimer(c.cfg.FlushInterval)
				tick = timer.C
			}
		case <-tick:
			timer, tick = nil, nil
			flush()
		case <-c.closing:
			for {
				select {
				case t := <-c.queue:
					batch = append(batch, t)
					if len(batch) >= c.cfg.BatchSize {
						flush()
					}
					continue
				default:
				}
				break
			}
			flush()
			return
		}
	}
}

// send posts one batch, retrying and splitting as needed, and counts the
// result of every turn in it.
func (c *Capture) send(batch []ProductionTurn) {
	if n := c.dropped.Load(); n != c.droppedLogged.Load() {
		c.droppedLogged.Store(n)
		c.log.LogAttrs(c.ctx, slog.LevelWarn, "production capture dropped turns", slog.Int64("dropped_total", n))
	}
	bo := backoff{base: c.cfg.RetryBase, max: 10 * time.Second}
	start := time.Now()
	for {
		if c.ctx.Err() != nil {
			c.failed.Add(int64(len(batch)))
			return
		}
		ans, err := c.cfg.Client.PostTurns(c.ctx, ProductionTurnBatch{AgentID: c.cfg.AgentID, Turns: batch})
		if err == nil {
			c.accepted.Add(int64(ans.Accepted))
			c.duplicates.Add(int64(ans.Duplicates))
			return
		}
		var ae *APIError
		var ve *ValidationError
		isolate := errors.As(err, &ve) ||
			(errors.As(err, &ae) && (ae.StatusCode == 409 || ae.StatusCode == 422 || ae.StatusCode == 413))
		switch {
		case isolate && len(batch) == 1:
			c.rejected.Add(1)
			c.log.LogAttrs(c.ctx, slog.LevelWarn, "production turn rejected",
				slog.String("turn_id", batch[0].TurnID), slog.Any("error", err))
			return
		case isolate:
			for _, part := range splitBatch(batch, err) {
				c.send(part)
			}
			return
		case IsTemporary(err) && time.Since(start) < c.cfg.MaxRetryTime:
			if !sleep(c.ctx, bo.next(RetryAfter(err))) {
				c.failed.Add(int64(len(batch)))
				return
			}
		default:
			c.failed.Add(int64(len(batch)))
			c.log.LogAttrs(c.ctx, slog.LevelError, "production turns not delivered",
				slog.Int("turns", len(batch)), slog.Any("error", err))
			return
		}
	}
}

// splitBatch splits a refused batch: around the turn the error points at
// (/turns/<i>…) when it names one, otherwise in halves.
func splitBatch(batch []ProductionTurn, err error) [][]ProductionTurn {
	ptr := ""
	var ae *APIError
	var ve *ValidationError
	switch {
	case errors.As(err, &ae):
		ptr = ae.Pointer
	case errors.As(err, &ve):
		ptr = ve.First().Pointer
	}
	if rest, ok := strings.CutPrefix(ptr, "/turns/"); ok {
		idx, _, _ := strings.Cut(rest, "/")
		if i, err := strconv.Atoi(idx); err == nil && i >= 0 && i < len(batch) {
			others := make([]ProductionTurn, 0, len(batch)-1)
			others = append(others, batch[:i]...)
			others = append(others, batch[i+1:]...)
			return [][]ProductionTurn{{batch[i]}, others}
		}
	}
	mid := len(batch) / 2
	return [][]ProductionTurn{batch[:mid], batch[mid:]}
}
