package rollout

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/store"
)

// ClaimParams is a decoded claim (SPEC §4.3). Zero values mean defaults.
type ClaimParams struct {
	TenantID string
	AgentID  string
	// KeyID identifies the caller's API key, for the long-poll cap.
	KeyID string
	// MaxRollouts is 1..64 (default 1).
	MaxRollouts int
	// LeaseSeconds is the lease asked for; nil means the default. It is
	// clamped to [LeaseMin, LeaseMax].
	LeaseSeconds  *float64
	WorkerID      string
	WorkerVersion string
	// Wait long-polls up to this long for work (0 answers at once).
	Wait time.Duration
	// IdempotencyKey makes a retried claim return the same rollouts.
	IdempotencyKey string
}

// Claimed is a claim's answer: the ClaimResponse and the store's clock at
// the claim, which the Date header carries so workers can estimate their
// clock offset (SPEC §4.5).
type Claimed struct {
	Response flywheel.ClaimResponse
	// Body is Response encoded, already validated against the contract.
	Body []byte
	Now  time.Time
}

// Claim leases up to MaxRollouts queued rollouts, long-polling up to Wait
// when there are none, and always answers a ClaimResponse: an empty one
// carries the agent's backoff in poll_after_ms. Claims sharing an
// IdempotencyKey lease once: while one runs, the others wait for its
// answer and return it (ErrClaimPending past its wait plus
// Config.SameKeySlack).
func (s *Service) Claim(ctx context.Context, p ClaimParams) (Claimed, error) {
	if p.IdempotencyKey == "" {
		return s.claim(ctx, p)
	}
	key := p.TenantID + "\x00" + p.AgentID + "\x00" + p.IdempotencyKey
	return s.sameKey.do(ctx, key, min(p.Wait, s.cfg.MaxWait), func() (Claimed, error) { return s.claim(ctx, p) })
}

func (s *Service) claim(ctx context.Context, p ClaimParams) (Claimed, error) {
	if p.MaxRollouts == 0 {
		p.MaxRollouts = 1
	}
	lease := s.clampLease(p.LeaseSeconds)
	wait := min(p.Wait, s.cfg.MaxWait)
	if wait > 0 {
		if !s.polls.acquire(p.KeyID) {
			wait = 0 // over the cap: answer at once
		} else {
			defer s.polls.release(p.KeyID)
		}
	}
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		woken := s.wake.channel(p.TenantID, p.AgentID)
		out, n, err := s.claimOnce(ctx, p, lease)
		if err != nil || n > 0 || wait == 0 {
			return out, err
		}
		recheck := time.NewTimer(s.cfg.RecheckEvery)
		s.waiting()
		select {
		case <-woken:
		case <-recheck.C:
		case <-timeout:
			recheck.Stop()
			return s.emptyClaim(p)
		case <-s.closing:
			recheck.Stop()
			return s.emptyClaim(p)
		case <-ctx.Done():
			recheck.Stop()
			return Claimed{}, ctx.Err()
		}
		recheck.Stop()
	}
}

// emptyClaim answers a long-poll that found nothing: the backoff does not
// grow again, since the poll itself waited.
func (s *Service) emptyClaim(p ClaimParams) (Claimed, error) {
	return s.answer(flywheel.ClaimResponse{
		Rollouts:    []flywheel.RolloutRequest{},
		PollAfterMS: int(s.backoff.current(p.TenantID, p.AgentID).Milliseconds()),
	}, s.clock.Now())
}

// answer encodes a claim answer. The contract is the authority for what
// gyre sends, not only for what it accepts: an answer that fails it is a
// bug and is never sent.
func (s *Service) answer(resp flywheel.ClaimResponse, now time.Time) (Claimed, error) {
	body, err := flywheel.Marshal(flywheel.DefClaimResponse, resp)
	if err != nil {
		return Claimed{}, fmt.Errorf("claim answer fails flywheel/1: %w", err)
	}
	return Claimed{Response: resp, Body: body, Now: now}, nil
}

func (s *Service) claimOnce(ctx context.Context, p ClaimParams, lease time.Duration) (Claimed, int, error) {
	secrets := make([]mintedSecrets, p.MaxRollouts)
	hashes := make([]store.RolloutSecrets, p.MaxRollouts)
	for i := range secrets {
		sec, err := mintSecrets()
		if err != nil {
			return Claimed{}, 0, err
		}
		secrets[i], hashes[i] = sec, sec.hashes()
	}
	res, err := s.store.Claim(ctx, store.ClaimRequest{
		TenantID: p.TenantID, AgentID: p.AgentID, Max: p.MaxRollouts, Lease: lease,
		WorkerID: p.WorkerID, WorkerVersion: p.WorkerVersion, IdempotencyKey: p.IdempotencyKey, Secrets: hashes,
	})
	if err != nil {
		return Claimed{}, 0, err
	}
	resp := flywheel.ClaimResponse{Rollouts: make([]flywheel.RolloutRequest, 0, len(res.Rollouts))}
	for _, c := range res.Rollouts {
		req, err := s.rolloutRequest(c.Rollout, secrets[c.Secrets])
		if err != nil {
			return Claimed{}, 0, err
		}
		resp.Rollouts = append(resp.Rollouts, req)
	}
	switch {
	case res.MoreQueued:
		resp.PollAfterMS = 0
	case len(res.Rollouts) > 0:
		resp.PollAfterMS = int(s.backoff.reset(p.TenantID, p.AgentID).Milliseconds())
	default:
		resp.PollAfterMS = int(s.backoff.grow(p.TenantID, p.AgentID).Milliseconds())
	}
	out, err := s.answer(resp, res.Now)
	return out, len(res.Rollouts), err
}

// rolloutRequest is the RolloutRequest for a freshly leased rollout.
func (s *Service) rolloutRequest(r store.Rollout, sec mintedSecrets) (flywheel.RolloutRequest, error) {
	if r.Deadline == nil || r.LeaseExpiresAt == nil {
		return flywheel.RolloutRequest{}, fmt.Errorf("rollout %s leased without deadline or expiry", r.ID)
	}
	meta, err := json.Marshal(map[string]any{
		"task_id": r.TaskID, "batch_id": r.BatchID, "group_id": r.GroupID, "attempt": r.Attempt,
	})
	if err != nil {
		return flywheel.RolloutRequest{}, err
	}
	return flywheel.RolloutRequest{
		RolloutID:      r.ID,
		TurnInput:      r.TurnInput,
		LLMURL:         s.base + "/gw/" + sec.gatewayToken + "/v1",
		APIKey:         sec.gatewayKey,
		ArtifactsDir:   "rollouts/" + r.ID,
		DeadlineTS:     epochSeconds(*r.Deadline),
		LeaseToken:     flywheel.Some(sec.leaseToken),
		LeaseExpiresTS: flywheel.Some(epochSeconds(*r.LeaseExpiresAt)),
		Metadata:       meta,
	}, nil
}

// clampLease turns lease_seconds into the granted lease.
func (s *Service) clampLease(sec *float64) time.Duration {
	if sec == nil || math.IsNaN(*sec) {
		return s.cfg.LeaseDefault
	}
	d := time.Duration(*sec * float64(time.Second))
	if *sec > s.cfg.LeaseMax.Seconds() {
		d = s.cfg.LeaseMax
	}
	return min(max(d, s.cfg.LeaseMin), s.cfg.LeaseMax)
}

// epochSeconds is t as the contract's _ts numbers: epoch seconds with
// microsecond precision.
func epochSeconds(t time.Time) float64 {
	return float64(t.UnixMicro()) / 1e6
}

// mintedSecrets are one rollout's fresh secrets (SPEC §2, §6.1): each 256
// random bits, base64url without padding (43 characters).
type mintedSecrets struct {
	leaseToken, gatewayToken, gatewayKey string
}

func mintSecrets() (mintedSecrets, error) {
	var out mintedSecrets
	for _, dst := range []*string{&out.leaseToken, &out.gatewayToken, &out.gatewayKey} {
		v, err := secret()
		if err != nil {
			return mintedSecrets{}, err
		}
		*dst = v
	}
	return out, nil
}

func (m mintedSecrets) hashes() store.RolloutSecrets {
	return store.RolloutSecrets{
		LeaseToken:   HashSecret(m.leaseToken),
		GatewayToken: HashSecret(m.gatewayToken),
		GatewayKey:   HashSecret(m.gatewayKey),
	}
}

// HashSecret is how gyre stores a rollout secret: its SHA-256.
func HashSecret(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func secret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// backoff is the poll_after_ms an agent gets for an empty claim: PollMin,
// doubling per empty claim up to PollMax, reset by new work. It is per
// replica; several replicas each grow their own, which only makes an idle
// agent poll a little more.
type backoff struct {
	mu       sync.Mutex
	min, max time.Duration
	next     map[string]time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff {
	return &backoff{min: lo, max: hi, next: map[string]time.Duration{}}
}

// grow returns the backoff for this empty claim and doubles the next one.
func (b *backoff) grow(tenantID, agentID string) time.Duration {
	k := tenantID + "\x00" + agentID
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.next[k]
	if !ok {
		d = b.min
	}
	b.next[k] = min(d*2, b.max)
	return d
}

// current is the backoff an empty claim would get now, without growing it.
func (b *backoff) current(tenantID, agentID string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.next[tenantID+"\x00"+agentID]; ok {
		return d
	}
	return b.min
}

// reset forgets an agent's growth and returns the minimum.
func (b *backoff) reset(tenantID, agentID string) time.Duration {
	b.mu.Lock()
	delete(b.next, tenantID+"\x00"+agentID)
	b.mu.Unlock()
	return b.min
}

// wakeups lets long-polls wait for work queued on this replica: each
// (tenant, agent) has a channel that is closed, and replaced, on notify.
type wakeups struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newWakeups() *wakeups { return &wakeups{ch: map[string]chan struct{}{}} }

func (w *wakeups) channel(tenantID, agentID string) <-chan struct{} {
	k := tenantID + "\x00" + agentID
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[k]
	if !ok {
		c = make(chan struct{})
		w.ch[k] = c
	}
	return c
}

func (w *wakeups) notify(tenantID, agentID string) {
	k := tenantID + "\x00" + agentID
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ch[k]; ok {
		close(c)
		delete(w.ch, k)
	}
}

// pollLimiter caps concurrent long-polls per API key.
type pollLimiter struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

func newPollLimiter(max int) *pollLimiter { return &pollLimiter{max: max, n: map[string]int{}} }

func (l *pollLimiter) acquire(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key] >= l.max {
		return false
	}
	l.n[key]++
	return true
}

func (l *pollLimiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key]--; l.n[key] <= 0 {
		delete(l.n, key)
	}
}
