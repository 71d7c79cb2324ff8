package store

import (
	"context"
	"time"
)

// BlobKind says which table makes a blob the tenant's, and so where its
// bytes live in the blob store.
type BlobKind string

// Kinds of tenant blobs.
const (
	// BlobUploaded is a blob uploaded through PUT /api/v1/blobs/{sha256}
	// or listed by a run record (trajectories, workspace files):
	// blobs/<tenant>/<sha256>.
	BlobUploaded BlobKind = "blob"
	// BlobFixture is the content of a fixture revision:
	// fixtures/<tenant>/<sha256>.
	BlobFixture BlobKind = "fixture"
)

// TenantBlob is a content-addressed blob a tenant references.
type TenantBlob struct {
	SHA256 string
	Kind   BlobKind
	Size   int64
}

// CallFilter selects production calls (the policy endpoint's traffic).
type CallFilter struct {
	// AgentID keeps one agent's calls when set.
	AgentID string
	// Since keeps only calls received at or after it.
	Since time.Time
}

// RecordedStore reads back what gyre recorded, for the admin API (SPEC
// §4.8): a rollout's gateway calls a page at a time, the production
// calls, and which blobs a tenant references.
type RecordedStore interface {
	// RolloutCalls returns one page of the rollout's calls in sequence
	// order, numbered as GatewayCalls numbers them; the cursor is bound to
	// the rollout. ErrNotFound when the rollout is not the tenant's.
	RolloutCalls(ctx context.Context, tenantID, rolloutID string, p Page) ([]GatewayCall, string, error)
	// ProductionCalls lists the tenant's production calls matching f, in
	// order of receipt (received time, then the replica's arrival count,
	// then id), with Seq 0. The cursor is bound to the tenant and f.
	ProductionCalls(ctx context.Context, tenantID string, f CallFilter, p Page) ([]GatewayCall, string, error)
	// TenantBlob finds a blob the tenant references, uploaded blobs
	// first, then fixture revisions; ErrNotFound when it references none
	// with that digest (whatever other tenants hold).
	TenantBlob(ctx context.Context, tenantID, sha256 string) (TenantBlob, error)
}
