package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// BlobStore is where request and response bodies go: content-addressed
// objects. *blobstore.Store satisfies it.
type BlobStore interface {
	Exists(ctx context.Context, key string) (bool, error)
	PutContent(ctx context.Context, prefix string, r io.Reader) (sha string, size int64, err error)
}

// errRevoked is the cancellation cause of a request cut because its
// rollout's credential was revoked.
var errRevoked = errors.New("rollout credential revoked")

// Recorder keeps one replica's gateway state: the requests in flight, a
// short-lived cache of credential reads, the records waiting for a flush,
// and what it knows per rollout. It writes records in batches, off the
// request path, together with the replica's heartbeat and flush watermark.
//
// The watermark W it publishes promises: every request this replica
// admitted on a credential read whose lease-clock time is before W has its
// record durable. Each flush reads the lease clock first (D), then, under
// the lock, takes the waiting records and sets W to the minimum of D, the
// earliest possible credential-read time of every request in flight (the
// D of the flush before it registered, taken before its read) and the
// read time of every cached credential that could still admit one. The
// store seals a submitted rollout at a lease-clock time later than the
// revocation of its token, so once every replica that touched it has
// W past the seal, no record of it can still appear (SPEC §6.3).
type Recorder struct {
	st        Store
	blobs     BlobStore
	clock     clock.Clock
	log       *slog.Logger
	cfg       Config
	replicaID string
	started   time.Time
	metrics   *metrics

	mu        sync.Mutex
	nextID    uint64
	lastD     time.Time
	received  time.Time // the latest arrival time handed out
	inflight  map[uint64]*flight
	pending   []*pendingRecord
	inTransit []*pendingRecord
	cache     map[[32]byte]*cachedAccess
	// forgets counts calls of Forget: a credential read that overlapped
	// one is not cached, since it may predate the revocation.
	forgets  uint64
	rollouts map[string]*rolloutState

	flushMu sync.Mutex // one flush at a time
	known   knownBlobs
	wake    chan struct{}
	stop    chan struct{}
	done    sync.WaitGroup
	running bool
}

type flight struct {
	// id counts arrivals on this replica; received is the arrival time,
	// never earlier than an earlier arrival's even if the clock steps
	// back. Together they number a rollout's calls in order of arrival.
	id       uint64
	received time.Time
	lb       time.Time
	rollout  string
	cancel   context.CancelCauseFunc
	// left: the request gave up its slot among the rollout's requests in
	// flight (leave) before its record was finished.
	left bool
	// answer is the record of an answer later requests may chain from,
	// announced before its last bytes went out (call.announce).
	answer *pendingRecord
}

type cachedAccess struct {
	access  store.GatewayAccess
	expires time.Time // wall-clock monotonic reading
	// readAt is the gateway clock's reading when access was read: the
	// lease clock then was access.Now, so a lease or deadline reached
	// since is seen without another read.
	readAt time.Time
}

type rolloutState struct {
	touched        bool
	countedDurable bool
	inflight       int
	lastUsed       time.Time
	// early holds the ids of records makeCountDurable wrote before their
	// flush: they are durable already, so usage leaves them out
	// rather than count them twice against the batch's limits.
	early map[string]bool
	// writing counts the store writes of the rollout's records under way
	// (a flush, makeCountDurable), began those ever begun; idle is closed
	// when writing drops to 0. A record is waiting until its write's
	// bookkeeping, after the write, so usage reads the store only when no
	// write is under way and none began meanwhile: else a record could be
	// in both the store and the waiting records, or in neither.
	writing int
	began   uint64
	idle    chan struct{}
}

// beginWrite marks a store write of the rollout's records as under way.
// r.mu must be held.
func (st *rolloutState) beginWrite() {
	if st.writing == 0 {
		st.idle = make(chan struct{})
	}
	st.writing++
	st.began++
}

// endWrite marks it done, its bookkeeping made. r.mu must be held.
func (st *rolloutState) endWrite() {
	st.writing--
	if st.writing == 0 {
		close(st.idle)
	}
}

// pendingRecord is a finished call waiting for its flush.
type pendingRecord struct {
	rec store.GatewayRecord
	lb  time.Time
	// body is what the request forwarded; nil when not captured.
	body *bodyParts
	// response is the answer (reassembled for streams); nil when none.
	response []byte
	attempts int
}

type bodyParts struct {
	spec      protocolSpec
	fwd       *forwarded
	messages  [][]byte
	tokenizer *string
	// resolved are the items a previous_response_id stood for.
	resolved [][]byte
}

// newRecorder returns a Recorder for one process; its replica id is
// cfg.ReplicaID plus a random suffix.
func newRecorder(st Store, blobs BlobStore, clk clock.Clock, log *slog.Logger, cfg Config) *Recorder {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return &Recorder{
		st: st, blobs: blobs, clock: clk, log: log, cfg: cfg,
		replicaID: cfg.ReplicaID + "-" + hex.EncodeToString(b[:]),
		inflight:  map[uint64]*flight{}, cache: map[[32]byte]*cachedAccess{}, rollouts: map[string]*rolloutState{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// ReplicaID names this process in touch rows and the replicas table.
func (r *Recorder) ReplicaID() string { return r.replicaID }

// Start registers the replica (its first heartbeat) and starts the flush
// and revocation loops. They stop with Stop.
func (r *Recorder) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("gateway recorder already started")
	}
	r.running = true
	r.mu.Unlock()
	now, err := r.st.LeaseClock(ctx)
	if err != nil {
		return fmt.Errorf("gateway recorder: %w", err)
	}
	r.started = now
	if err := r.Flush(ctx); err != nil {
		return fmt.Errorf("gateway recorder: register replica: %w", err)
	}
	bg := context.WithoutCancel(ctx)
	if !r.cfg.NoFlush {
		r.done.Go(func() { r.loop(bg, r.cfg.FlushInterval, r.wake, r.flushTick) })
	}
	r.done.Go(func() { r.loop(bg, r.cfg.RevokeCheckEvery, nil, r.watchOnce) })
	return nil
}

// loop runs fn every period and whenever wake fires (nil: never). Only
// the flush loop listens to r.wake: were the revocation loop to take a
// wake-up, the flush it asked for would wait a whole interval.
func (r *Recorder) loop(ctx context.Context, every time.Duration, wake <-chan struct{}, fn func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-wake:
		}
		fn(ctx)
	}
}

func (r *Recorder) flushTick(ctx context.Context) {
	if err := r.Flush(ctx); err != nil {
		r.log.LogAttrs(ctx, slog.LevelError, "gateway flush failed", slog.String("replica_id", r.replicaID), slog.Any("error", err))
	}
}

// Stop ends the loops and flushes what is left (bounded by ctx). When
// nothing is in flight and every record is durable it marks the replica
// drained, so it holds up no reconciliation; otherwise it marks it dead,
// and rollouts it touched reconcile as unreconciled.
func (r *Recorder) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.running {
		r.mu.Unlock()
		return nil
	}
	r.running = false
	r.mu.Unlock()
	close(r.stop)
	r.done.Wait()
	var err error
	for {
		if err = r.Flush(ctx); err != nil || r.Pending() == 0 || ctx.Err() != nil {
			break
		}
	}
	r.mu.Lock()
	drained := err == nil && len(r.pending) == 0 && len(r.inflight) == 0
	r.mu.Unlock()
	if serr := r.st.StopReplica(context.WithoutCancel(ctx), r.replicaID, drained); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// Pending counts records waiting for a flush.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + len(r.inTransit)
}

// Idle reports whether no request is in flight and every record is
// durable.
func (r *Recorder) Idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight) == 0 && len(r.pending) == 0 && len(r.inTransit) == 0
}

// full reports whether no more records can wait.
func (r *Recorder) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)+len(r.inTransit) >= r.cfg.MaxPending
}

// begin registers a request in flight, with its place in the order of
// arrival, before its credential is read.
func (r *Recorder) begin(cancel context.CancelCauseFunc) *flight {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	if now.Before(r.received) {
		now = r.received
	}
	r.received = now
	f := &flight{id: r.nextID, received: now, lb: r.lastD, cancel: cancel}
	r.inflight[f.id] = f
	return f
}

// attach binds a flight to its rollout and returns the rollout's requests
// in flight on this replica, this one included.
func (r *Recorder) attach(f *flight, rolloutID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.rollout = rolloutID
	st := r.state(rolloutID)
	st.inflight++
	return st.inflight
}

func (r *Recorder) state(rolloutID string) *rolloutState {
	st, ok := r.rollouts[rolloutID]
	if !ok {
		st = &rolloutState{}
		r.rollouts[rolloutID] = st
	}
	st.lastUsed = time.Now()
	return st
}

// leave gives up a request's slot among its rollout's requests in flight
// (max_concurrent_requests) once the upstream has answered, before the
// answer's last bytes go to the client: a client that sends its next
// request as soon as it has the answer must not find this one still
// counted. The flight stays registered for the flush until finish.
func (r *Recorder) leave(f *flight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaveLocked(f)
}

func (r *Recorder) leaveLocked(f *flight) {
	if f.left || f.rollout == "" {
		return
	}
	f.left = true
	if st, ok := r.rollouts[f.rollout]; ok && st.inflight > 0 {
		st.inflight--
	}
}

// announce attaches to a flight the record of an answer later requests
// may chain from, until finish queues the final record.
func (r *Recorder) announce(f *flight, p *pendingRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.answer = p
}

// finish ends a flight and queues its record, if any, in one step, so a
// flush sees the request either in flight or waiting, never neither.
func (r *Recorder) finish(f *flight, p *pendingRecord) {
	r.mu.Lock()
	delete(r.inflight, f.id)
	r.leaveLocked(f)
	n := 0
	if p != nil {
		p.lb = f.lb
		r.pending = append(r.pending, p)
		n = len(r.pending)
	}
	r.mu.Unlock()
	if p != nil && r.metrics != nil {
		r.metrics.recorded(p.rec.Counted, p.rec.Reason)
	}
	if n >= r.cfg.FlushBatch {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// access reads a gateway credential, from the cache when caching is on
// and a read younger than GrantCacheTTL exists. Credentials of rollouts
// with limits are read fresh each time, since budgets need current totals.
func (r *Recorder) access(ctx context.Context, h [32]byte) (store.GatewayAccess, error) {
	r.mu.Lock()
	if e, ok := r.cache[h]; ok && time.Now().Before(e.expires) {
		a := e.access
		a.Now = a.Now.Add(r.clock.Now().Sub(e.readAt))
		if a.Usable() {
			r.mu.Unlock()
			return a, nil
		}
		delete(r.cache, h)
	}
	forgets := r.forgets
	r.mu.Unlock()
	readAt := r.clock.Now()
	a, err := r.st.GatewayAccess(ctx, h)
	if err != nil {
		return a, err
	}
	if r.cfg.GrantCacheTTL > 0 && len(a.Limits) == 0 && a.Usable() {
		r.mu.Lock()
		if r.forgets == forgets {
			r.cache[h] = &cachedAccess{access: a, expires: time.Now().Add(r.cfg.GrantCacheTTL), readAt: readAt}
		}
		r.mu.Unlock()
	}
	return a, nil
}

// Forget drops the cached credential of a rollout whose token this
// process has just revoked, so its next request reads the revocation.
func (r *Recorder) Forget(rolloutID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgets++
	for h, e := range r.cache {
		if e.access.RolloutID == rolloutID {
			delete(r.cache, h)
		}
	}
}

// ForgetAll drops every cached credential, after a revocation of many
// rollouts (a batch cancelled).
func (r *Recorder) ForgetAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgets++
	clear(r.cache)
}

// touch durably records, once per rollout and replica, that this replica
// serves the rollout, before its first request goes upstream.
func (r *Recorder) touch(ctx context.Context, rolloutID string) error {
	r.mu.Lock()
	done := r.state(rolloutID).touched
	r.mu.Unlock()
	if done {
		return nil
	}
	if err := r.st.TouchGateway(ctx, rolloutID, r.replicaID); err != nil {
		return err
	}
	r.mu.Lock()
	r.state(rolloutID).touched = true
	r.mu.Unlock()
	return nil
}

// needsDurableCount reports whether no counted completion of the rollout
// is known durable from this replica yet.
func (r *Recorder) needsDurableCount(rolloutID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.state(rolloutID).countedDurable
}

// makeCountDurable writes, before a rollout's first counted completion on
// this replica is delivered, a provisional record of it (and, first, the
// rollout's earlier records still waiting, so sequence numbers follow
// arrival), so that a release right after the answer sees the completion
// (SPEC §4.5). The final record replaces it at the next flush.
func (r *Recorder) makeCountDurable(ctx context.Context, provisional store.GatewayRecord) error {
	rolloutID := *provisional.RolloutID
	r.mu.Lock()
	var recs []store.GatewayRecord
	// Records a flush is writing right now get their numbers from it.
	for _, p := range r.pending {
		if p.rec.RolloutID != nil && *p.rec.RolloutID == rolloutID {
			recs = append(recs, p.rec)
		}
	}
	st := r.state(rolloutID)
	st.beginWrite()
	r.mu.Unlock()
	recs = append(recs, provisional)
	err := r.st.RecordGateway(ctx, store.GatewayFlush{ReplicaID: r.replicaID, Records: recs})
	r.mu.Lock()
	defer r.mu.Unlock()
	defer st.endWrite()
	if err != nil {
		return err
	}
	st.countedDurable = true
	if st.early == nil {
		st.early = map[string]bool{}
	}
	for _, rec := range recs {
		st.early[rec.ID] = true
	}
	return nil
}

// usage totals the rollout's records on this replica: those durable,
// read by durable (a store read), plus those waiting, each counted once.
// A store write of the rollout's records under way, or begun while
// durable reads, makes it wait and read again: read meanwhile, a record
// could be counted twice (a budget refused too early) or not at all (a
// request let past its budget).
func (r *Recorder) usage(ctx context.Context, rolloutID string, durable func(context.Context) (store.GatewayUsage, error)) (store.GatewayUsage, error) {
	for {
		r.mu.Lock()
		st := r.state(rolloutID)
		if st.writing > 0 {
			idle := st.idle
			r.mu.Unlock()
			select {
			case <-idle:
				continue
			case <-ctx.Done():
				return store.GatewayUsage{}, ctx.Err()
			}
		}
		began := st.began
		r.mu.Unlock()
		u, err := durable(ctx)
		if err != nil {
			return u, err
		}
		r.mu.Lock()
		settled := r.rollouts[rolloutID] == st && st.began == began
		p := r.pendingUsageLocked(rolloutID)
		r.mu.Unlock()
		if settled {
			u.Calls += p.Calls
			u.Completions += p.Completions
			u.TotalTokens += p.TotalTokens
			u.CostUSD += p.CostUSD
			return u, nil
		}
	}
}

// pendingUsageLocked totals the rollout's records not yet durable. r.mu
// must be held.
func (r *Recorder) pendingUsageLocked(rolloutID string) store.GatewayUsage {
	var u store.GatewayUsage
	var early map[string]bool
	if st, ok := r.rollouts[rolloutID]; ok {
		early = st.early
	}
	for _, list := range [][]*pendingRecord{r.inTransit, r.pending} {
		for _, p := range list {
			if p.rec.RolloutID == nil || *p.rec.RolloutID != rolloutID || early[p.rec.ID] {
				continue
			}
			u.Calls++
			if p.rec.Counted {
				u.Completions++
			}
			if p.rec.TotalTokens != nil {
				u.TotalTokens += *p.rec.TotalTokens
			}
			if p.rec.CostUSD != nil {
				u.CostUSD += *p.rec.CostUSD
			}
		}
	}
	return u
}

// pendingModels lists the models asked for in the rollout's records not
// yet durable.
func (r *Recorder) pendingModels(rolloutID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, list := range [][]*pendingRecord{r.inTransit, r.pending} {
		for _, p := range list {
			if p.rec.RolloutID != nil && *p.rec.RolloutID == rolloutID && p.rec.RequestedModel != nil {
				out = append(out, *p.rec.RequestedModel)
			}
		}
	}
	return out
}

// maxFlushBatch bounds the records one flush transaction writes.
const maxFlushBatch = 2000

// Flush writes the waiting records with their bodies and the replica's
// heartbeat and watermark.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	start := time.Now()
	d, err := r.st.LeaseClock(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.lastD = d
	n := min(len(r.pending), maxFlushBatch)
	batch := r.pending[:n:n]
	r.pending = slices.Clone(r.pending[n:])
	r.inTransit = batch
	w := d
	for _, f := range r.inflight {
		if f.lb.Before(w) {
			w = f.lb
		}
	}
	for _, p := range r.pending {
		if p.lb.Before(w) {
			w = p.lb
		}
	}
	now := time.Now()
	for h, e := range r.cache {
		if !now.Before(e.expires) {
			delete(r.cache, h)
		} else if e.access.Now.Before(w) {
			w = e.access.Now
		}
	}
	for id, st := range r.rollouts {
		if st.inflight == 0 && st.writing == 0 && now.Sub(st.lastUsed) > 10*time.Minute {
			delete(r.rollouts, id)
		}
	}
	r.mu.Unlock()

	write, retry := r.prepare(ctx, batch)
	for _, p := range retry {
		if p.lb.Before(w) {
			w = p.lb
		}
	}
	recs := make([]store.GatewayRecord, len(write))
	writing := map[string]*rolloutState{}
	r.mu.Lock()
	for i, p := range write {
		recs[i] = p.rec
		if id := p.rec.RolloutID; id != nil && writing[*id] == nil {
			writing[*id] = r.state(*id)
			writing[*id].beginWrite()
		}
	}
	r.mu.Unlock()
	err = r.st.RecordGateway(ctx, store.GatewayFlush{ReplicaID: r.replicaID, Records: recs,
		Beat: &store.ReplicaBeat{FlushedThrough: w, TTL: r.cfg.ReplicaTTL, Started: r.started}})
	r.mu.Lock()
	r.inTransit = nil
	if err != nil {
		r.pending = append(slices.Clone(batch), r.pending...)
	} else {
		if len(retry) > 0 {
			r.pending = append(retry, r.pending...)
		}
		for _, p := range write {
			if p.rec.RolloutID == nil {
				continue
			}
			st := writing[*p.rec.RolloutID]
			if p.rec.Counted {
				st.countedDurable = true
			}
			delete(st.early, p.rec.ID)
		}
	}
	for _, st := range writing {
		st.endWrite()
	}
	r.mu.Unlock()
	if r.metrics != nil {
		result := "ok"
		if err != nil {
			result = "error"
		}
		r.metrics.flushes.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return fmt.Errorf("flush %d gateway records: %w", len(recs), err)
	}
	return nil
}

// maxBlobAttempts is how many flushes a record waits for its bodies to
// store before it is written without them (and so is not training grade).
const maxBlobAttempts = 5

// prepare stores the bodies of a batch and derives fingerprints. Records
// whose bodies failed to store are returned in retry, unless they failed
// too often, and are then written without them.
func (r *Recorder) prepare(ctx context.Context, batch []*pendingRecord) (write, retry []*pendingRecord) {
	type job struct {
		p   *pendingRecord
		err error
	}
	jobs := make([]job, len(batch))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, p := range batch {
		jobs[i].p = p
		if p.body != nil && len(p.rec.Fingerprint) == 0 {
			spec := p.body.spec
			if spec == nil {
				spec = chatSpec{}
			}
			p.rec.Fingerprint, _ = json.Marshal(spec.fingerprint(p.body))
		}
		if r.blobs == nil || ((p.body == nil || p.rec.RequestBlob != nil) && (p.response == nil || p.rec.ResponseBlob != nil)) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			jobs[i].err = r.storeBodies(ctx, p)
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		if j.err == nil {
			write = append(write, j.p)
			continue
		}
		j.p.attempts++
		if j.p.attempts < maxBlobAttempts {
			retry = append(retry, j.p)
			continue
		}
		r.log.LogAttrs(ctx, slog.LevelError, "gateway bodies not stored; recording the call without them",
			slog.String("call_id", j.p.rec.ID), slog.Any("error", j.err))
		write = append(write, j.p)
	}
	return write, retry
}

// storeBodies stores a record's request, as content-addressed message
// blobs plus a document with the remaining bytes, and its response.
func (r *Recorder) storeBodies(ctx context.Context, p *pendingRecord) error {
	base := "gateway/" + p.rec.TenantID
	if p.body != nil && p.rec.RequestBlob == nil {
		doc := requestDoc{Format: requestDocFormat, Head: string(p.body.fwd.head), Tail: string(p.body.fwd.tail),
			Messages: make([]string, len(p.body.messages)), Agent: p.body.fwd.agent, Added: p.body.fwd.absent,
			Items: p.body.fwd.shape}
		for i, m := range p.body.messages {
			sum := sha256.Sum256(m)
			doc.Messages[i] = hex.EncodeToString(sum[:])
			if err := r.putKnown(ctx, base+"/messages", doc.Messages[i], m); err != nil {
				return err
			}
		}
		for _, m := range p.body.resolved {
			sum := sha256.Sum256(m)
			sha := hex.EncodeToString(sum[:])
			if err := r.putKnown(ctx, base+"/messages", sha, m); err != nil {
				return err
			}
			doc.Resolved = append(doc.Resolved, sha)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		sha := hex.EncodeToString(sum[:])
		if err := r.putKnown(ctx, base+"/requests", sha, b); err != nil {
			return err
		}
		key := base + "/requests/" + sha
		p.rec.RequestBlob = &key
	}
	if p.response != nil && p.rec.ResponseBlob == nil {
		sum := sha256.Sum256(p.response)
		sha := hex.EncodeToString(sum[:])
		if err := r.putKnown(ctx, base+"/responses", sha, p.response); err != nil {
			return err
		}
		key := base + "/responses/" + sha
		p.rec.ResponseBlob = &key
	}
	return nil
}

// putKnown stores data under prefix/sha unless it is known to be there.
func (r *Recorder) putKnown(ctx context.Context, prefix, sha string, data []byte) error {
	key := prefix + "/" + sha
	if r.known.has(key) {
		return nil
	}
	ok, err := r.blobs.Exists(ctx, key)
	if err != nil {
		return fmt.Errorf("blob %s: %w", key, err)
	}
	if !ok {
		got, _, err := r.blobs.PutContent(ctx, prefix, bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("store blob: %w", err)
		}
		if got != sha {
			return fmt.Errorf("store blob: sha-256 %s, want %s", got, sha)
		}
	}
	r.known.add(key)
	return nil
}

// watchOnce cuts requests in flight whose rollout no longer admits
// requests and forgets their cached credentials.
func (r *Recorder) watchOnce(ctx context.Context) {
	r.mu.Lock()
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, f := range r.inflight {
		add(f.rollout)
	}
	for _, e := range r.cache {
		add(e.access.RolloutID)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	live, err := r.st.GatewayLive(ctx, ids)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "gateway revocation check failed", slog.Any("error", err))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.inflight {
		if seen[f.rollout] && !live[f.rollout] {
			f.cancel(errRevoked)
			if r.metrics != nil {
				r.metrics.cuts.Inc()
			}
		}
	}
	for h, e := range r.cache {
		if seen[e.access.RolloutID] && !live[e.access.RolloutID] {
			delete(r.cache, h)
		}
	}
}

// requestDocFormat tags a stored request document.
const requestDocFormat = "gyre.gateway-request/1"

// requestDoc is a stored request: the forwarded body is Head + "[" + the
// message blobs joined by "," + "]" + Tail, byte for byte (Items "value":
// Head + the one message blob + Tail; "none": Head + Tail). Agent holds
// the agent's values of the members the gateway replaced, Added the
// members it added. Resolved lists, for a Responses request with a
// previous_response_id, the message blobs of the items that id stood for
// (earlier calls' input and output), which the fingerprint covers.
type requestDoc struct {
	Format   string                     `json:"format"`
	Head     string                     `json:"head"`
	Messages []string                   `json:"messages"`
	Tail     string                     `json:"tail"`
	Agent    map[string]json.RawMessage `json:"agent"`
	Added    []string                   `json:"added"`
	Items    itemsShape                 `json:"items,omitempty"`
	Resolved []string                   `json:"resolved,omitempty"`
}

// knownBlobs remembers blob keys known to exist, so resent history is not
// checked again; it forgets everything when it grows past its bound.
type knownBlobs struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

const maxKnownBlobs = 200_000

func (k *knownBlobs) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[key]
	return ok
}

func (k *knownBlobs) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil || len(k.keys) >= maxKnownBlobs {
		k.keys = map[string]struct{}{}
	}
	k.keys[key] = struct{}{}
}
