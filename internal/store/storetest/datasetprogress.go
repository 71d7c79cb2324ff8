package storetest

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
)

// A dataset has no progress until a build records some; a build records
// it while the dataset is building (a rebuild from 0 included), and once
// the dataset is ready or failed a late report changes nothing.
func testDatasetProgress(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{})
	d := f.dataset(t, store.NewDataset{})
	if d.Progress != nil {
		t.Fatalf("a new dataset has progress %+v, want nil", d.Progress)
	}
	ctx := t.Context()
	progress := func() *store.DatasetProgress {
		t.Helper()
		got, err := f.s.GetDataset(ctx, f.tenant.ID, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Progress
	}
	for _, p := range []store.DatasetProgress{{Rollouts: 0, Rows: 0}, {Rollouts: 7, Rows: 12}, {Rollouts: 0, Rows: 0}, {Rollouts: 9, Rows: 15}} {
		if err := f.s.SetDatasetProgress(ctx, d.ID, p); err != nil {
			t.Fatal(err)
		}
		if got := progress(); got == nil || *got != p {
			t.Fatalf("progress %+v, want %+v", got, p)
		}
	}
	if _, err := f.s.FinishDataset(ctx, store.DatasetBuilt{ID: d.ID, State: store.DatasetReady, FileSHA256: "ab",
		FileBytes: 1, BlobKey: "k", Manifest: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.SetDatasetProgress(ctx, d.ID, store.DatasetProgress{Rollouts: 1, Rows: 1}); err != nil {
		t.Fatal(err)
	}
	if got := progress(); got == nil || *got != (store.DatasetProgress{Rollouts: 9, Rows: 15}) {
		t.Fatalf("a late report on a ready dataset: %+v", got)
	}
	if list, _, err := f.s.ListDatasets(ctx, f.tenant.ID, store.Page{}); err != nil || len(list) != 1 || list[0].Progress == nil {
		t.Fatalf("ListDatasets: %+v %v", list, err)
	}
}
