package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store/storetest"
)

// call sends a JSON request and decodes a JSON answer into out (if not nil).
func call(t *testing.T, method, url, key, body string, out any, headers ...string) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// TestReplicas_TwoServersOnOnePostgresBehaveAsOne runs two real gyre serve
// processes on one PostgreSQL database: claims spread over both hand out
// every rollout exactly once, an Idempotency-Key is honoured across them,
// and both watchdogs together abandon and retry each lapsed rollout once.
func TestReplicas_TwoServersOnOnePostgresBehaveAsOne(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	db := storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
	bin := buildGyre(t)
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	a := startServe(t, bin, "--db", db, "--data", t.TempDir(), "--bootstrap-admin-key-file", keyFile)
	b := startServe(t, bin, "--db", db, "--data", t.TempDir())
	defer a.stop(t)
	defer b.stop(t)
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(raw))

	var agent struct {
		Key string `json:"key"`
	}
	if st := call(t, "POST", b.base+"/api/v1/keys", admin, `{"role":"agent"}`, &agent); st != http.StatusCreated {
		t.Fatalf("create agent key on replica b: %d", st)
	}
	var cases []string
	for i := range 100 {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"q%d"},"graders":[{"contains":"ok"}]}`, i, i))
	}
	if st := call(t, "POST", a.base+"/api/v1/suites", admin, `{"name":"replicas","cases":[`+strings.Join(cases, ",")+`]}`, nil); st != http.StatusCreated {
		t.Fatalf("upload suite: %d", st)
	}

	// One Idempotency-Key, two replicas: one batch.
	var b1, b2 struct {
		BatchID    string   `json:"batch_id"`
		RolloutIDs []string `json:"rollout_ids"`
	}
	body := `{"agent_id":"agent-1","suite":"replicas","group_size":10}`
	call(t, "POST", a.base+"/api/v1/batches", admin, body, &b1, "Idempotency-Key", "once")
	call(t, "POST", b.base+"/api/v1/batches", admin, body, &b2, "Idempotency-Key", "once")
	if b1.BatchID == "" || b1.BatchID != b2.BatchID || len(b1.RolloutIDs) != 1000 {
		t.Fatalf("batches %q (%d rollouts) and %q: want one batch of 1000 across replicas", b1.BatchID, len(b1.RolloutIDs), b2.BatchID)
	}

	// 32 claimers, half on each replica.
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		wg     sync.WaitGroup
	)
	for i := range 32 {
		base := a.base
		if i%2 == 1 {
			base = b.base
		}
		wg.Go(func() {
			for {
				var c struct {
					Rollouts []struct {
						RolloutID string `json:"rollout_id"`
					} `json:"rollouts"`
				}
				if st := call(t, "POST", base+"/agents/agent-1/claim", agent.Key, `{"lease_seconds":300}`, &c); st != http.StatusOK {
					t.Errorf("claim: %d", st)
					return
				}
				if len(c.Rollouts) == 0 {
					return
				}
				mu.Lock()
				for _, r := range c.Rollouts {
					counts[r.RolloutID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(counts) != 1000 {
		t.Fatalf("claimed %d distinct rollouts over two replicas, want 1000", len(counts))
	}
	for id, n := range counts {
		if n != 1 {
			t.Fatalf("rollout %s claimed %d times across replicas", id, n)
		}
	}

	// Both watchdogs run; a lapsed lease is abandoned and retried once.
	var small struct {
		BatchID string `json:"batch_id"`
	}
	call(t, "POST", b.base+"/api/v1/batches", admin, `{"agent_id":"agent-2","suite":"replicas","max_attempts":2}`, &small)
	for range 10 {
		var c struct {
			Rollouts []json.RawMessage `json:"rollouts"`
		}
		call(t, "POST", a.base+"/agents/agent-2/claim", agent.Key, `{"lease_seconds":5}`, &c)
		if len(c.Rollouts) != 1 {
			t.Fatalf("claim on agent-2: %d rollouts", len(c.Rollouts))
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sum struct {
			Counts map[string]int `json:"counts"`
		}
		call(t, "GET", b.base+"/api/v1/batches/"+small.BatchID, admin, "", &sum)
		if sum.Counts["abandoned"] == 10 {
			if sum.Counts["queued"] != 100 {
				t.Fatalf("after 10 abandonments: counts %v, want 90 untouched + 10 retries queued", sum.Counts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lapsed leases not abandoned: counts %v", sum.Counts)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var list struct {
		Items []struct {
			Attempt int    `json:"attempt"`
			State   string `json:"state"`
		} `json:"items"`
	}
	call(t, "GET", a.base+"/api/v1/rollouts?batch_id="+small.BatchID+"&limit=500", admin, "", &list)
	retries := 0
	for _, it := range list.Items {
		if it.Attempt == 2 {
			retries++
		}
	}
	if len(list.Items) != 110 || retries != 10 {
		t.Fatalf("rollouts of the batch: %d with %d retries, want 110 with exactly 10 retries", len(list.Items), retries)
	}
}
