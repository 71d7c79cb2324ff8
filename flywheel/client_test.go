package flywheel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

func TestClaimResult_ClockOffset(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		date       time.Time
		sent, recv time.Time
		want       time.Duration
	}{
		{"in step", base, base.Add(200 * time.Millisecond), base.Add(300 * time.Millisecond), 0},
		{"no Date", time.Time{}, base, base, 0},
		{"server ahead", base.Add(time.Hour), base, base.Add(100 * time.Millisecond), time.Hour - 100*time.Millisecond},
		{"server behind", base.Add(-time.Hour), base, base.Add(100 * time.Millisecond), -time.Hour + time.Second},
		{"slow round trip covers a second", base.Add(2 * time.Second), base, base.Add(3 * time.Second), 0},
	} {
		r := flywheel.ClaimResult{ServerDate: tc.date, Sent: tc.sent, Received: tc.recv}
		if got := r.ClockOffset(); got != tc.want {
			t.Errorf("%s: ClockOffset = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestClient_Errors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("Lease-Token") != "lt" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/base/rollouts/r%2F1/heartbeat", "/base/rollouts/r/1/heartbeat":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"lease_lost","message":"lost"}}`)
		case "/base/rollouts/r2/heartbeat":
			w.Header().Set("Retry-After", "12")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"code":"rate_limited","message":"slow down"}}`)
		case "/base/rollouts/r3/heartbeat":
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/base/rollouts/r4/release":
			w.WriteHeader(http.StatusGone)
			io.WriteString(w, `{"error":{"code":"rollout_finished","message":"done"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, fmt.Sprintf(`{"error":{"code":"not_found","message":"%s"}}`, r.URL.EscapedPath()))
		}
	}))
	defer srv.Close()
	c, err := flywheel.NewClient(srv.URL+"/base/", "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	err = c.Heartbeat(ctx, "r/1", "lt")
	if !errors.Is(err, flywheel.ErrLeaseLost) || flywheel.IsTemporary(err) {
		t.Errorf("heartbeat r/1 = %v, want ErrLeaseLost, not temporary", err)
	}
	err = c.Heartbeat(ctx, "r2", "lt")
	if !flywheel.IsTemporary(err) || flywheel.RetryAfter(err) != 12*time.Second {
		t.Errorf("heartbeat r2 = %v (retry after %s), want temporary after 12 s", err, flywheel.RetryAfter(err))
	}
	err = c.Heartbeat(ctx, "r3", "lt")
	if ra := flywheel.RetryAfter(err); ra < 59*time.Minute || ra > time.Hour {
		t.Errorf("Retry-After as a date = %s", ra)
	}
	if err := c.Release(ctx, "r4", "lt"); !errors.Is(err, flywheel.ErrRolloutFinished) {
		t.Errorf("release = %v", err)
	}

	dead, _ := flywheel.NewClient("http://127.0.0.1:1", "k")
	err = dead.Heartbeat(ctx, "r", "lt")
	var te *flywheel.TransportError
	if !errors.As(err, &te) || !flywheel.IsTemporary(err) {
		t.Errorf("unreachable server = %v, want a temporary TransportError", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Heartbeat(cctx, "r", "lt"); flywheel.IsTemporary(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled = %v", err)
	}
}

func TestClient_RefusesAnInvalidClaimAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"rollouts":[{"rollout_id":"r"}],"poll_after_ms":0}`)
	}))
	defer srv.Close()
	c, _ := flywheel.NewClient(srv.URL, "k")
	_, err := c.Claim(context.Background(), "agent-1", flywheel.ClaimRequest{})
	var ve *flywheel.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Claim = %v, want a contract violation", err)
	}
}

func TestNewClient_Validates(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x", "http://", "http://u:p@host", "http://host?x=1"} {
		if _, err := flywheel.NewClient(u, "k"); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
	if _, err := flywheel.NewClient("http://host", ""); err == nil {
		t.Error("NewClient accepted an empty key")
	}
}

func TestClient_ATimedOutRequestIsTemporary(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, _ := flywheel.NewClient(srv.URL, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Heartbeat(ctx, "r", "lt")
	if !flywheel.IsTemporary(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timed out = %v, want a temporary error: a slow server is retried, not fatal", err)
	}
}
