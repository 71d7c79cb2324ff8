package main

import (
	"context"
	"fmt"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
)

// seedDatasets creates, as POST /api/v1/datasets does, an sft dataset of
// every seeded rollout and builds it, so the dataset pages show a
// manifest over the whole store; it returns the dataset's id.
func seedDatasets(ctx context.Context, st store.Store, blobs *blobstore.Store, tenantID string) (string, error) {
	d, err := build.Create(ctx, st, tenantID, build.Request{AgentID: seed.Agent, Format: dataset.FormatSFT})
	if err != nil {
		return "", fmt.Errorf("create dataset: %w", err)
	}
	if err := build.New(st, blobs, nil).Build(ctx, d.ID); err != nil {
		return "", fmt.Errorf("build dataset: %w", err)
	}
	return d.ID, nil
}

// keptDataset finds the dataset seedDatasets made in a kept store, and
// makes it when the store was seeded before datasets were.
func keptDataset(ctx context.Context, st store.Store, blobs *blobstore.Store, tenantID string) (string, error) {
	ds, _, err := st.ListDatasets(ctx, tenantID, store.Page{Limit: 1})
	if err != nil {
		return "", err
	}
	if len(ds) > 0 {
		return ds[0].ID, nil
	}
	return seedDatasets(ctx, st, blobs, tenantID)
}
