package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
)

// dyingBlobs is a blob store whose build upload dies half-way, like the
// process running it: it stores what it got so far (the partial upload a
// killed process leaves behind), then calls midway and kill, and fails.
type dyingBlobs struct {
	*blobstore.Store
	half   int64
	midway func(partial []byte)
	kill   context.CancelFunc
}

func (d dyingBlobs) PutContent(ctx context.Context, prefix string, r io.Reader) (string, int64, error) {
	partial := make([]byte, d.half)
	if _, err := io.ReadFull(r, partial); err != nil {
		return "", 0, err
	}
	if _, err := d.Put(ctx, prefix+"/partial-upload", bytes.NewReader(partial), nil); err != nil {
		return "", 0, err
	}
	d.midway(partial)
	d.kill()
	return "", 0, ctx.Err()
}

// A dataset built in-process on the store (gyre dataset export without
// --server) holds its build job's lease: while it builds, a server's
// builder leaves the job alone and the file and manifest are 409; when
// the building process dies half-way through the upload, the dataset
// stays building (never served from the partial upload) until the lease
// lapses, and then a server's builder rebuilds it to the same bytes — the
// bytes a server build of the same selection has — with the same
// manifest but for the dataset's own id and creation time.
func TestDatasets_DirectBuildHoldsTheLeaseAndAKilledOneIsRebuiltToTheSameBytes(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{s3OnPostgres: true})
		ctx := context.Background()
		for i := range 3 {
			rr := h.rollout(`,"policy":"p1"`)
			if _, err := h.client(rr).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("refund order %d ✓", i))}}); err != nil {
				t.Fatal(err)
			}
			h.submit(rr, `{"final_text":"refund issued","llm_call_count":1,"tool_calls":[]}`)
			h.settle(rr.RolloutID)
		}
		server := build.New(h.st, h.blobs, nil)
		ref := h.createDataset(server, `{"agent_id":"agent-1","format":"rl","min_margin":0.25}`)
		if ref.State != "ready" {
			t.Fatalf("reference build: %+v", ref)
		}
		refFile := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+ref.ID+"/file", h.admin, "", http.StatusOK).body
		if len(lines(refFile)) != 3 {
			t.Fatalf("reference file has %d rows, want 3:\n%s", len(lines(refFile)), refFile)
		}

		// The direct build: created through the API's own path, built
		// under the job's lease, killed half-way through its upload.
		margin := 0.25
		d, err := build.Create(ctx, h.st, h.tenant.ID, build.Request{AgentID: "agent-1", Format: dataset.FormatRL,
			Filters: dataset.Filters{MinMargin: &margin}})
		if err != nil {
			t.Fatal(err)
		}
		if r := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK); !bytes.Contains(r.body, []byte(`"progress":null`)) {
			t.Fatalf("a dataset no build started: %s", r.body)
		}
		procCtx, kill := context.WithCancel(ctx)
		defer kill()
		var leftBehind []byte
		blobs := dyingBlobs{Store: h.blobs, half: int64(len(refFile) / 2), kill: kill, midway: func(partial []byte) {
			leftBehind = partial
			if n, err := server.RunOnce(ctx, "server", time.Minute); err != nil || n != 0 {
				t.Errorf("a server's builder took a build the CLI holds: %d %v", n, err)
			}
			for _, p := range []string{"/file", "/manifest"} {
				h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+p, h.admin, "", http.StatusConflict)
			}
			if r := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK); !bytes.Contains(r.body, []byte(`"progress":{"rollouts_read":`)) {
				t.Errorf("a running build records no progress: %s", r.body)
			}
		}}
		var p build.Progress
		err = build.New(h.st, blobs, nil).BuildNow(procCtx, "cli", d.ID, time.Minute, &p)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the killed build returned %v, want context.Canceled", err)
		}
		if leftBehind == nil || !bytes.HasPrefix(refFile, leftBehind) || p.Rollouts() == 0 {
			t.Fatalf("the build was not killed half-way: %d bytes, %d rollouts read", len(leftBehind), p.Rollouts())
		}

		// Dead: the job stays leased, the dataset building, the partial
		// upload unserved.
		if err := build.New(h.st, h.blobs, nil).BuildNow(ctx, "cli-2", d.ID, time.Minute, nil); !errors.Is(err, build.ErrHeld) {
			t.Fatalf("a second direct build of a held job: %v, want ErrHeld", err)
		}
		h.clk.Advance(30 * time.Second)
		if n, err := server.RunOnce(ctx, "server", time.Minute); err != nil || n != 0 {
			t.Fatalf("a server's builder took the job before its lease lapsed: %d %v", n, err)
		}
		var v datasetView
		if err := json.Unmarshal(h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK).body, &v); err != nil ||
			v.State != "building" || v.FileSHA256 != nil {
			t.Fatalf("after the kill: %+v %v", v, err)
		}
		h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+"/file", h.admin, "", http.StatusConflict)

		// The lease lapses: a server's builder rebuilds it.
		h.clk.Advance(31 * time.Second)
		if n, err := server.RunOnce(ctx, "server", time.Minute); err != nil || n != 1 {
			t.Fatalf("the lapsed build was not taken over: %d %v", n, err)
		}
		if err := json.Unmarshal(h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK).body, &v); err != nil ||
			v.State != "ready" || v.FileSHA256 == nil || *v.FileSHA256 != *ref.FileSHA256 {
			t.Fatalf("rebuilt: %+v %v, want ready with SHA-256 %s", v, err, *ref.FileSHA256)
		}
		if r := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID, h.admin, "", http.StatusOK); !bytes.Contains(r.body, []byte(`"progress":{"rollouts_read":3,"rows_written":3}`)) {
			t.Errorf("a ready dataset's progress is not its build's final counts: %s", r.body)
		}
		got := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+"/file", h.admin, "", http.StatusOK)
		sum := sha256.Sum256(got.body)
		if !bytes.Equal(got.body, refFile) || got.header.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` {
			t.Fatalf("rebuilt file differs from a server build of the same selection:\n%s\nwant\n%s", got.body, refFile)
		}
		manifest := func(raw json.RawMessage) map[string]any {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "dataset_id")
			delete(m, "created_at")
			return m
		}
		if diff := cmp.Diff(manifest(ref.Manifest), manifest(v.Manifest)); diff != "" {
			t.Errorf("manifests differ beyond id and creation time (-server +direct):\n%s", diff)
		}
	})
}
