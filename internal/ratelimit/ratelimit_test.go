package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func rate(t *testing.T, s string) *Rate {
	t.Helper()
	r, err := ParseRate(s)
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Rate
		err  bool
	}{
		{in: "10/s", want: Rate{Events: 10, Per: time.Second, Burst: 10}},
		{in: "600/m", want: Rate{Events: 600, Per: time.Minute, Burst: 600}},
		{in: "5/hour", want: Rate{Events: 5, Per: time.Hour, Burst: 5}},
		{in: " 100/s burst 20 ", want: Rate{Events: 100, Per: time.Second, Burst: 20}},
		{in: "1/minute burst 3", want: Rate{Events: 1, Per: time.Minute, Burst: 3}},
		{in: "10", err: true},
		{in: "0/s", err: true},
		{in: "-1/s", err: true},
		{in: "1.5/s", err: true},
		{in: "10/d", err: true},
		{in: "10/s burst 0", err: true},
		{in: "10/s burst x", err: true},
		{in: "", err: true},
	} {
		got, err := ParseRate(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseRate(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestNew_OffUnlessConfigured(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{nil, {}, {AllTenants: {}}, {"acme": {Turns: {}}}} {
		l, err := New(cfg, nil, nil)
		if err != nil || l != nil {
			t.Fatalf("New(%v) = %v, %v; want no limiter", cfg, l, err)
		}
		for range 1000 {
			if d, err := l.Allow(context.Background(), Turns, "t", "k"); err != nil || !d.Allowed {
				t.Fatalf("a nil limiter refused: %+v, %v", d, err)
			}
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"unknown surface": {AllTenants: {"heartbeats": {PerKey: &Rate{Events: 1, Per: time.Second, Burst: 1}}}},
		"empty tenant":    {"": {Turns: {PerKey: &Rate{Events: 1, Per: time.Second, Burst: 1}}}},
		"zero burst":      {AllTenants: {Turns: {PerKey: &Rate{Events: 1, Per: time.Second}}}},
		"zero period":     {AllTenants: {Turns: {PerTenant: &Rate{Events: 1, Burst: 1}}}},
	} {
		if _, err := New(cfg, nil, nil); err == nil {
			t.Errorf("%s: New accepted %v", name, cfg)
		}
	}
	if _, err := New(Config{"acme": {Turns: {PerKey: &Rate{Events: 1, Per: time.Second, Burst: 1}}}}, nil, nil); err == nil {
		t.Error("New accepted limits that name a tenant without a way to read tenant names")
	}
}

// TestAllow_PerKeyBucket: a key gets its burst at once, then one request
// per refill interval; another key has its own bucket.
func TestAllow_PerKeyBucket(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(t0)
	l, err := New(Config{AllTenants: {Turns: {PerKey: rate(t, "2/s burst 3")}}}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if d, _ := l.Allow(ctx, Turns, "t1", "k1"); !d.Allowed {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	d, _ := l.Allow(ctx, Turns, "t1", "k1")
	if d.Allowed || d.Scope != "key" || d.RetryAfter != 500*time.Millisecond || d.RetryAfterSeconds() != 1 {
		t.Fatalf("4th request: %+v, want refused by the key bucket, retry after 500ms (header 1 s)", d)
	}
	if d, _ := l.Allow(ctx, Turns, "t1", "k2"); !d.Allowed {
		t.Fatal("another key shares the first key's bucket")
	}
	if d, _ := l.Allow(ctx, Claims, "t1", "k1"); !d.Allowed {
		t.Fatal("a surface without limits refused")
	}
	c.Advance(499 * time.Millisecond)
	if d, _ := l.Allow(ctx, Turns, "t1", "k1"); d.Allowed {
		t.Fatal("admitted before a token refilled")
	}
	c.Advance(time.Millisecond)
	if d, _ := l.Allow(ctx, Turns, "t1", "k1"); !d.Allowed {
		t.Fatal("refused after waiting Retry-After")
	}
	c.Advance(time.Hour)
	for i := range 3 {
		if d, _ := l.Allow(ctx, Turns, "t1", "k1"); !d.Allowed {
			t.Fatalf("after idling, request %d: the bucket did not refill to its burst only", i+1)
		}
	}
	if d, _ := l.Allow(ctx, Turns, "t1", "k1"); d.Allowed {
		t.Fatal("the bucket refilled past its burst")
	}
}

// TestAllow_RefusalSpendsNothing: a request refused by the tenant bucket
// leaves its key's bucket untouched, and the other way round.
func TestAllow_RefusalSpendsNothing(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(t0)
	l, err := New(Config{AllTenants: {Gateway: {PerKey: rate(t, "1/s burst 2"), PerTenant: rate(t, "1/s burst 3")}}}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func(key string) Decision {
		d, err := l.Allow(ctx, Gateway, "t1", key)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// k1 takes its 2; k2 takes the tenant's 3rd.
	for _, k := range []string{"k1", "k1", "k2"} {
		if !allow(k).Allowed {
			t.Fatalf("%s refused within both bursts", k)
		}
	}
	// k2 has a token left but the tenant has none: refused by the tenant,
	// and k2's own token is not spent.
	if d := allow("k2"); d.Allowed || d.Scope != "tenant" || d.RetryAfter != time.Second {
		t.Fatalf("k2: %+v, want refused by the tenant bucket for 1s", d)
	}
	c.Advance(time.Second) // the tenant gets 1 token, k2 goes to 2 (its burst), k1 to 1
	if !allow("k2").Allowed {
		t.Fatal("k2 refused once the tenant refilled")
	}
	// The tenant is empty again; k1 is refused by whichever bucket frees
	// last, and the longer wait is reported.
	if d := allow("k1"); d.Allowed || d.Scope != "tenant" {
		t.Fatalf("k1: %+v, want refused by the tenant", d)
	}
}

func TestAllow_TenantEntryReplacesDefault(t *testing.T) {
	t.Parallel()
	names := map[string]string{"id-acme": "acme", "id-other": "other"}
	var lookups int
	var mu sync.Mutex
	namer := func(_ context.Context, id string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		n, ok := names[id]
		if !ok {
			return "", errors.New("no such tenant")
		}
		return n, nil
	}
	c := clock.NewFake(t0)
	l, err := New(Config{
		AllTenants: {Admin: {PerTenant: rate(t, "1/m")}, Turns: {PerTenant: rate(t, "1/m")}},
		"acme":     {Admin: {PerTenant: rate(t, "3/m")}},
	}, c, namer)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func(tenant string, s Surface) int {
		n := 0
		for range 10 {
			if d, err := l.Allow(ctx, s, tenant, "k"); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := count("id-acme", Admin); n != 3 {
		t.Errorf("acme admitted %d admin requests, want its own 3", n)
	}
	if n := count("id-acme", Turns); n != 10 {
		t.Errorf("acme admitted %d of 10 turns: its own entry has no turns limit, the * entry must not apply", n)
	}
	if n := count("id-other", Admin); n != 1 {
		t.Errorf("other admitted %d admin requests, want the * entry's 1", n)
	}
	if lookups != 2 {
		t.Errorf("tenant names read %d times, want once per tenant", lookups)
	}
	if _, err := l.Allow(ctx, Admin, "id-missing", "k"); err == nil {
		t.Error("a tenant whose name cannot be read was decided anyway")
	}
}

// TestAllow_SweepForgetsRefilledBuckets: memory stays bounded by the
// keys recently active; forgetting a full bucket changes no decision.
func TestAllow_SweepForgetsRefilledBuckets(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(t0)
	l, err := New(Config{AllTenants: {Gateway: {PerKey: rate(t, "10/s")}}}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 1000 {
		if d, _ := l.Allow(ctx, Gateway, "t", fmt.Sprintf("rollout-%d", i)); !d.Allowed {
			t.Fatal("refused a first request")
		}
	}
	if n := l.Buckets(); n != 1000 {
		t.Fatalf("%d buckets, want 1000", n)
	}
	for range 10 {
		_, _ = l.Allow(ctx, Gateway, "t", "busy")
	}
	c.Advance(sweepEvery)
	// busy is refilled too after a minute; one request drains nothing.
	_, _ = l.Allow(ctx, Gateway, "t", "new")
	if n := l.Buckets(); n != 1 {
		t.Fatalf("%d buckets after a sweep, want only the one just used", n)
	}
}

func TestAllow_Concurrent(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(t0)
	l, err := New(Config{AllTenants: {Claims: {PerTenant: rate(t, "1/h burst 500")}}}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if d, _ := l.Allow(context.Background(), Claims, "t", fmt.Sprint(g)); d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 500 {
		t.Fatalf("admitted %d of 1600 concurrent requests, want exactly the burst of 500", admitted)
	}
}

func TestMustParseRate(t *testing.T) {
	t.Parallel()
	if r := MustParseRate("3/m burst 1"); r != (Rate{Events: 3, Per: time.Minute, Burst: 1}) {
		t.Errorf("MustParseRate = %+v", r)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustParseRate accepted an invalid rate")
		}
	}()
	MustParseRate("3/fortnight")
}
