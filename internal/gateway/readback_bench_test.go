package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// BenchmarkBodyReader_ConversationPage reads back one page of calls (50)
// of a 50-turn conversation from the file blob store: call i resends the
// i earlier messages, so the page refers to 1,275 messages, 51 distinct.
func BenchmarkBodyReader_ConversationPage(b *testing.B) {
	ctx := context.Background()
	blobs, err := blobstore.Open(ctx, "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer blobs.Close()
	rec := &Recorder{blobs: blobs, log: telemetry.Discard()}
	var recs []store.GatewayRecord
	var msgs []string
	for i := range 50 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat(fmt.Sprintf("turn %d ", i), 60)))
		req, e := parseChatRequest([]byte(`{"model":"m","temperature":0.2,"messages":[` + strings.Join(msgs, ",") + `]}`))
		if e != nil {
			b.Fatal(e.Message)
		}
		p := &pendingRecord{rec: store.GatewayRecord{ID: fmt.Sprint(i), TenantID: "t1"},
			body:     &bodyParts{fwd: req.forward(Policy{Model: "served"}), messages: req.messages},
			response: []byte(`{"id":"x","object":"chat.completion","choices":[]}`)}
		if err := rec.storeBodies(ctx, p); err != nil {
			b.Fatal(err)
		}
		recs = append(recs, p.rec)
	}
	b.ResetTimer()
	for b.Loop() {
		r := NewBodyReader(blobs, "t1")
		for _, c := range recs {
			if _, err := r.Read(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	}
}
