// Package rollout runs the server side of the flywheel/1 rollout life
// (SPEC §4.3–§4.7): claims with server-directed backoff and long-polls,
// heartbeats, releases, output intake, the watchdog that ends lapsed
// leases, and the durable grading of accepted outputs. State lives in the
// store; this package holds the rules that are not SQL: secrets, clamping,
// intake normalisation, wire shapes, backoff and wake-ups.
package rollout

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// Config tunes the rollout rules. The zero value of a field means its default.
type Config struct {
	// PublicURL is the base written into llm_url (SPEC §2). Required.
	PublicURL string
	// LeaseMin and LeaseMax clamp a claim's lease_seconds (default 5 s, 300 s).
	LeaseMin, LeaseMax time.Duration
	// LeaseDefault is the lease when a claim asks for none (default 60 s).
	LeaseDefault time.Duration
	// Grace is how long after deadline_ts an output is still accepted and
	// a leased rollout is left alone (default 30 s).
	Grace time.Duration
	// PollMin and PollMax bound the poll_after_ms backoff an agent polling
	// an empty queue gets (default 1 s growing to 10 s).
	PollMin, PollMax time.Duration
	// MaxWait caps ?wait_ms= (default 30 s).
	MaxWait time.Duration
	// LongPollsPerKey caps concurrent long-polls per API key (default 64);
	// past it a claim answers at once.
	LongPollsPerKey int
	// SameKeySlack is how much longer than a running claim's long-poll a
	// claim with the same Idempotency-Key waits for its answer before it
	// answers ErrClaimPending (default 5 s).
	SameKeySlack time.Duration
	// RecheckEvery is how often a long-poll looks for work other replicas
	// queued (default 1 s); work queued on this replica wakes it at once.
	RecheckEvery time.Duration
	// SweepEvery is the watchdog's period (default 2 s); SweepLimit the
	// most rollouts of each kind one sweep ends (default 500).
	SweepEvery time.Duration
	SweepLimit int
	// GradeEvery is how often the grader looks for due jobs when not woken
	// (default 500 ms); GradeLease how long it holds a job (default 60 s).
	GradeEvery time.Duration
	GradeLease time.Duration
	// ReplicaID names this process in job leases; default a random id.
	ReplicaID string
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseMin, 5*time.Second)
	def(&c.LeaseMax, 300*time.Second)
	def(&c.LeaseDefault, 60*time.Second)
	def(&c.Grace, 30*time.Second)
	def(&c.PollMin, time.Second)
	def(&c.PollMax, 10*time.Second)
	def(&c.MaxWait, 30*time.Second)
	def(&c.RecheckEvery, time.Second)
	def(&c.SameKeySlack, 5*time.Second)
	def(&c.SweepEvery, 2*time.Second)
	def(&c.GradeEvery, 500*time.Millisecond)
	def(&c.GradeLease, 60*time.Second)
	if c.LongPollsPerKey == 0 {
		c.LongPollsPerKey = 64
	}
	if c.SweepLimit == 0 {
		c.SweepLimit = 500
	}
	if c.ReplicaID == "" {
		c.ReplicaID = "replica-" + randomID()
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	u, err := url.Parse(c.PublicURL)
	switch {
	case c.PublicURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("rollout: public URL %q must be an absolute http(s) URL", c.PublicURL)
	case c.LeaseMin <= 0 || c.LeaseMax < c.LeaseMin:
		return errors.New("rollout: lease bounds must satisfy 0 < min ≤ max")
	case c.LeaseDefault < c.LeaseMin || c.LeaseDefault > c.LeaseMax:
		return errors.New("rollout: the default lease must lie within the lease bounds")
	case c.PollMin <= 0 || c.PollMax < c.PollMin:
		return errors.New("rollout: poll bounds must satisfy 0 < min ≤ max")
	case c.Grace < 0 || c.MaxWait < 0 || c.SweepEvery <= 0 || c.GradeEvery <= 0 || c.GradeLease <= 0 || c.RecheckEvery <= 0 || c.SameKeySlack <= 0:
		return errors.New("rollout: durations must be positive")
	}
	return nil
}

// Service is the rollout life of one replica.
type Service struct {
	cfg     Config
	store   store.Store
	clock   clock.Clock
	log     *slog.Logger
	base    string // PublicURL without a trailing slash
	backoff *backoff
	wake    *wakeups
	polls   *pollLimiter
	waiting func() // Deps.Waiting, never nil
	sameKey *sameKeyClaims
	grader  *Grader
	closing chan struct{}
}

// Deps are the Service's collaborators.
type Deps struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Grader grades accepted outputs; nil builds one with no judge and no
	// command graders allowed, reading emitted tool calls from Blobs.
	Grader *Grader
	// Blobs reads the gateway's recorded bodies for the Grader built when
	// Grader is nil; nil leaves emitted tool calls unknown.
	Blobs gateway.BlobReader
	// Waiting, when set, is called each time a claim starts waiting: a
	// long-poll that found no work, or a claim waiting for the running
	// claim with its Idempotency-Key. It must not block. Tests use it to
	// know a claim is pending before they change what it waits for.
	Waiting func()
}

// New returns a Service. Start its watchdog and grader with Run.
func New(cfg Config, d Deps) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil {
		return nil, errors.New("rollout: a store is required")
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		cfg:     cfg,
		store:   d.Store,
		clock:   d.Clock,
		log:     d.Logger,
		base:    strings.TrimRight(cfg.PublicURL, "/"),
		backoff: newBackoff(cfg.PollMin, cfg.PollMax),
		wake:    newWakeups(),
		polls:   newPollLimiter(cfg.LongPollsPerKey),
		waiting: func() {},
		sameKey: newSameKeyClaims(cfg.SameKeySlack),
		closing: make(chan struct{}),
	}
	if d.Waiting != nil {
		s.waiting = d.Waiting
	}
	s.sameKey.waiting = s.waiting
	s.grader = d.Grader
	if s.grader == nil {
		s.grader = NewGrader(d.Store, GraderDeps{Logger: d.Logger, Blobs: d.Blobs})
	}
	return s, nil
}

// Config returns the service's effective configuration.
func (s *Service) Config() Config { return s.cfg }

// Close ends every long-poll with an empty claim; call it when the server
// starts shutting down, so draining does not wait out the polls.
func (s *Service) Close() {
	select {
	case <-s.closing:
	default:
		close(s.closing)
	}
}

// WorkQueued tells waiting claimers of an agent that work arrived (a new
// batch, a retry, a release) and resets the agent's backoff.
func (s *Service) WorkQueued(tenantID, agentID string) {
	s.backoff.reset(tenantID, agentID)
	s.wake.notify(tenantID, agentID)
}
