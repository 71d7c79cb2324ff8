package rollout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/store"
)

func TestClampLease(t *testing.T) {
	t.Parallel()
	s := &Service{cfg: Config{PublicURL: "http://x"}.WithDefaults()}
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name string
		in   *float64
		want time.Duration
	}{
		{"absent is the default", nil, 60 * time.Second},
		{"within bounds", f(42.5), 42500 * time.Millisecond},
		{"below the minimum", f(1), 5 * time.Second},
		{"negative", f(-10), 5 * time.Second},
		{"zero", f(0), 5 * time.Second},
		{"above the maximum", f(301), 300 * time.Second},
		{"huge", f(1e300), 300 * time.Second},
	}
	for _, c := range cases {
		if got := s.clampLease(c.in); got != c.want {
			t.Errorf("%s: clampLease = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBackoff_GrowsWhileEmptyAndResetsOnWork(t *testing.T) {
	t.Parallel()
	b := newBackoff(time.Second, 10*time.Second)
	var got []time.Duration
	for range 6 {
		got = append(got, b.grow("t", "a"))
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff sequence = %v, want %v seconds", got, want)
		}
	}
	if d := b.grow("t", "other"); d != time.Second {
		t.Errorf("another agent starts at %v, want 1s", d)
	}
	if d := b.reset("t", "a"); d != time.Second {
		t.Errorf("reset = %v", d)
	}
	if d := b.grow("t", "a"); d != time.Second {
		t.Errorf("after new work the backoff starts again at %v, want 1s", d)
	}
}

func TestWakeups_NotifyWakesWaiters(t *testing.T) {
	t.Parallel()
	w := newWakeups()
	c1 := w.channel("t", "a")
	c2 := w.channel("t", "b")
	w.notify("t", "a")
	select {
	case <-c1:
	default:
		t.Fatal("notify did not wake the agent's waiter")
	}
	select {
	case <-c2:
		t.Fatal("notify woke another agent's waiter")
	default:
	}
	if c3 := w.channel("t", "a"); c3 == c1 {
		t.Fatal("a woken channel was handed out again")
	}
}

func TestPollLimiter(t *testing.T) {
	t.Parallel()
	l := newPollLimiter(2)
	if !l.acquire("k") || !l.acquire("k") {
		t.Fatal("could not take the first two long-polls")
	}
	if l.acquire("k") {
		t.Fatal("took a third long-poll past the cap")
	}
	if !l.acquire("other") {
		t.Fatal("the cap is per key")
	}
	l.release("k")
	if !l.acquire("k") {
		t.Fatal("a released slot was not reusable")
	}
}

func TestSecrets_AreDistinct256BitBase64URL(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		m, err := mintSecrets()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{m.leaseToken, m.gatewayToken, m.gatewayKey} {
			if len(s) != 43 || strings.ContainsAny(s, "+/=") {
				t.Fatalf("secret %q is not 43 base64url characters", s)
			}
			if seen[s] {
				t.Fatalf("secret repeated: %q", s)
			}
			seen[s] = true
		}
		h := m.hashes()
		if h.LeaseToken != HashSecret(m.leaseToken) || h.GatewayKey == h.GatewayToken {
			t.Fatal("hashes do not match their secrets")
		}
	}
}

func TestNormalizeOutput(t *testing.T) {
	t.Parallel()
	sha := func(s string) string { return flywheel.InlineArtifactOf(s).Inline.SHA256 }
	cases := []struct {
		name      string
		body      string
		wantPtr   string // "" = accepted
		wantCanon string
	}{
		{
			name:      "absent tool_calls is stored as null and absent omitted count as 0",
			body:      `{"final_text":"hi"}`,
			wantCanon: `{"final_text":"hi","tool_calls":null,"tool_calls_omitted_count":0}`,
		},
		{
			name:      "tool_calls [] stays distinct from null",
			body:      `{"final_text":"hi","tool_calls":[]}`,
			wantCanon: `{"final_text":"hi","tool_calls":[],"tool_calls_omitted_count":0}`,
		},
		{
			name:    "server-authored score is rejected",
			body:    `{"final_text":"hi","score":1}`,
			wantPtr: "/score",
		},
		{
			name:    "status_code must be null when outcome unknown",
			body:    `{"final_text":"hi","tool_calls":[{"name":"t","outcome":"unknown","status_code":200}]}`,
			wantPtr: "/tool_calls/0/status_code",
		},
		{
			name:    "inline artifact whose content does not hash to its sha256",
			body:    `{"final_text":"hi","artifacts":{"a.txt":{"sha256":"` + sha("other") + `","size_bytes":2,"content":"hi"}}}`,
			wantPtr: "/artifacts/a.txt",
		},
		{
			name:    "inline artifact whose size is wrong",
			body:    `{"final_text":"hi","artifacts":{"a/b":{"sha256":"` + sha("hi") + `","size_bytes":3,"content":"hi"}}}`,
			wantPtr: "/artifacts/a~1b",
		},
		{
			name:    "string artifact that is neither a digest nor a skip marker",
			body:    `{"final_text":"hi","artifacts":{"x":"not-a-digest"}}`,
			wantPtr: "/artifacts/x",
		},
		{
			name:      "skip marker and inline artifact accepted",
			body:      `{"final_text":"hi","artifacts":{"big":"skipped:too_large:2000000000","a":{"sha256":"` + sha("hi") + `","size_bytes":2,"content":"hi"}}}`,
			wantCanon: `{"artifacts":{"a":{"content":"hi","sha256":"` + sha("hi") + `","size_bytes":2},"big":"skipped:too_large:2000000000"},"final_text":"hi","tool_calls":null,"tool_calls_omitted_count":0}`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			canon, hash, _, err := NormalizeOutput([]byte(c.body))
			if c.wantPtr != "" {
				var ge *gyre.Error
				if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody || ge.Pointer != c.wantPtr {
					t.Fatalf("err = %v, want invalid_body at %s", err, c.wantPtr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != c.wantCanon {
				t.Errorf("canonical = %s\nwant        %s", canon, c.wantCanon)
			}
			if len(hash) != 64 {
				t.Errorf("hash = %q", hash)
			}
		})
	}
}

func TestNormalizeOutput_AbsentAndNullToolCallsReplayAlike(t *testing.T) {
	t.Parallel()
	_, a, _, err := NormalizeOutput([]byte(`{"final_text":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, b, _, err := NormalizeOutput([]byte(`{"tool_calls": null, "final_text":"x", "tool_calls_omitted_count": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	_, c, _, err := NormalizeOutput([]byte(`{"final_text":"x","tool_calls":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("an output omitting tool_calls must equal one sending tool_calls: null")
	}
	if a == c {
		t.Error("tool_calls [] must not equal tool_calls null")
	}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reported flywheel.Optional[int]
		counted  int
		want     string
		reason   string
	}{
		{flywheel.Some(3), 3, "on_policy", ""},
		{flywheel.Some(0), 0, "on_policy", ""},
		{flywheel.Some(2), 3, "off_policy", "agent reported 2 completions, gateway counted 3"},
		{flywheel.Null[int](), 3, "unreconciled", "llm_call_count_not_reported"},
		{flywheel.Optional[int]{}, 0, "unreconciled", "llm_call_count_not_reported"},
	}
	for _, c := range cases {
		got, reason := Reconcile(c.reported, c.counted)
		r := ""
		if reason != nil {
			r = *reason
		}
		if got != c.want || r != c.reason {
			t.Errorf("Reconcile(%v, %d) = %s %q, want %s %q", c.reported, c.counted, got, r, c.want, c.reason)
		}
	}
}

func TestGradedItem_OmitsAdvisoryFields(t *testing.T) {
	t.Parallel()
	var out flywheel.RolloutOutput
	if err := json.Unmarshal([]byte(`{"final_text":"x","reward":1,"success":true,"agent_fingerprint":{"sdk":"1"},"tool_calls":null}`), &out); err != nil {
		t.Fatal(err)
	}
	item, err := gradedItem(storeInput(), out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(item)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"reward"`, `"success"`, `"agent_fingerprint"`} {
		if strings.Contains(string(b), k) {
			t.Errorf("graded item carries %s: %s", k, b)
		}
	}
	if item.ToolCalls != nil {
		t.Error("tool_calls null must stay nil (not reported)")
	}
}

func storeInput() store.GradingInput {
	return store.GradingInput{Input: json.RawMessage(`{"question":"q"}`), Graders: json.RawMessage(`[]`)}
}
