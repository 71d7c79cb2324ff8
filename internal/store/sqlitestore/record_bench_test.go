package sqlitestore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// BenchmarkRecordGateway measures the gateway's record flush: batches of
// 32 finished calls over 4 rollouts, as the recorder writes them under
// load (docs/benchmarks.md). Reported per record.
func BenchmarkRecordGateway(b *testing.B) {
	s, err := Open(b.Context(), Config{Path: filepath.Join(b.TempDir(), "gyre.db"), Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	tn, err := s.CreateTenant(b.Context(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	const perFlush = 32
	rollouts := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	str := func(v string) *string { return &v }
	tokens, cost := int64(18), 0.25
	now := time.Now()
	b.ResetTimer()
	for i := range b.N {
		recs := make([]store.GatewayRecord, perFlush)
		for j := range recs {
			n := i*perFlush + j
			fb, done := now.Add(time.Millisecond), now.Add(2*time.Millisecond)
			recs[j] = store.GatewayRecord{ID: uuid.NewString(), TenantID: tn.ID, AgentID: "agent-1", RolloutID: &rollouts[n%len(rollouts)],
				ReplicaID: "replica-a", Policy: str("p1"), Upstream: str("u"), Model: str("served"), RequestedModel: str("asked"),
				Status: 200, Counted: true, Stream: n%2 == 0, ReceivedAt: now, Arrival: uint64(n), FirstByteAt: &fb, DoneAt: &done,
				RequestBlob: str(fmt.Sprintf("gateway/%s/requests/%064x", tn.ID, n)), ResponseBlob: str(fmt.Sprintf("gateway/%s/responses/%064x", tn.ID, n)),
				Usage:       json.RawMessage(`{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`),
				TotalTokens: &tokens, CostUSD: &cost,
				Fingerprint: json.RawMessage(`{"prompt_sha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4","tools_sha256":null,"sampling":{}}`),
				EmittedIDs:  []string{}, ConsumedIDs: []string{},
			}
		}
		beat := &store.ReplicaBeat{FlushedThrough: now, TTL: 10 * time.Second, Started: now}
		if err := s.RecordGateway(b.Context(), store.GatewayFlush{ReplicaID: "replica-a", Records: recs, Beat: beat}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*perFlush), "µs/record")
}
