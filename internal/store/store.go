// Package store is gyre's one persistence API. Two real implementations
// satisfy it — SQLite (sqlitestore, the embedded default) and PostgreSQL
// (pgstore) — and one conformance suite (storetest) runs against both, so
// every feature behaves the same on either engine.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
)

// Sentinel errors callers branch on. Implementations wrap them with %w.
var (
	// ErrNotFound: no such object in the caller's tenant (foreign ids too).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a uniqueness rule refused the write.
	ErrConflict = errors.New("conflict")
	// ErrSchemaTooNew: the database was migrated by a newer gyre.
	ErrSchemaTooNew = errors.New("database schema is newer than this gyre")
	// ErrNotMigrated: the database lacks migrations this gyre needs.
	ErrNotMigrated = errors.New("database schema is not fully migrated")
	// ErrInvalidCursor: a Page.Cursor that this store did not issue for
	// this list (the API answers 400 invalid_query).
	ErrInvalidCursor = errors.New("invalid cursor")
	// ErrNUL: a text field gyre defines (a name, a worker id, a harness
	// URL, …) holds U+0000, which PostgreSQL cannot keep in text; every
	// engine refuses it alike, wrapped in a *FieldError naming the field.
	// Text a contract defines (turns, outputs, suite documents, a
	// harness's answer, model, run id and error) is stored losslessly.
	ErrNUL = errors.New("text holds U+0000")
)

// Page asks for one page of a list. Limit is clamped by the caller's API
// (default 50, max 500); Cursor is opaque and empty for the first page.
type Page struct {
	Limit  int
	Cursor string
}

// NewKey is what CreateKey stores: the key's metadata and the SHA-256 of
// its secret (the secret itself is never given to the store).
type NewKey struct {
	TenantID string
	Name     string
	Role     gyre.Role
	AgentIDs []string
	Hash     [32]byte
}

// Bootstrap describes the first-start admin key: created only when the
// store holds no tenant at all, atomically with the default tenant.
type Bootstrap struct {
	TenantName string
	Key        NewKey // TenantID is filled by the store
}

// Store is the persistence API. Every method takes the tenant it acts in
// (where one applies) and never reads or writes across tenants.
type Store interface {
	// Engine names the backend: "sqlite" or "postgres".
	Engine() string
	// Ping checks that the store is reachable and fully migrated.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error

	// Each concept's methods live in its own file of this package.
	TurnStore
	CatalogStore
	RolloutStore
	GatewayStore
	ExperimentStore
	GradingStore
	promotion.Store
	RecordedStore
	DatasetStore
	JobLeaseStore
	GroupStore
	PromotionStore
	UISessionStore
	UIStatsStore
	HarnessStore

	// CreateTenant creates a tenant; ErrConflict if the name exists.
	CreateTenant(ctx context.Context, name string) (gyre.Tenant, error)
	// TenantByName finds a tenant; ErrNotFound if none.
	TenantByName(ctx context.Context, name string) (gyre.Tenant, error)
	// TenantByID finds a tenant; ErrNotFound if none.
	TenantByID(ctx context.Context, id string) (gyre.Tenant, error)
	// ListTenants lists every tenant, oldest first.
	ListTenants(ctx context.Context) ([]gyre.Tenant, error)

	// BootstrapIfEmpty creates the bootstrap tenant and its admin key when
	// the store holds no tenant, and reports whether it did. Safe to call
	// from several processes at once: exactly one creates.
	BootstrapIfEmpty(ctx context.Context, b Bootstrap) (created bool, key gyre.APIKey, err error)

	// CreateKey stores a new key and returns it with its id.
	CreateKey(ctx context.Context, k NewKey) (gyre.APIKey, error)
	// KeyByHash finds a live (unrevoked) key by the SHA-256 of its secret;
	// ErrNotFound for unknown or revoked keys.
	KeyByHash(ctx context.Context, hash [32]byte) (gyre.APIKey, error)
	// ListKeys lists a tenant's keys (revoked ones too), oldest first.
	ListKeys(ctx context.Context, tenantID string, p Page) (keys []gyre.APIKey, next string, err error)
	// RevokeKey revokes a key of the tenant; ErrNotFound if it is not the
	// tenant's. Revoking a revoked key is not an error.
	RevokeKey(ctx context.Context, tenantID, keyID string) error
}

// Micros converts a time to the stored representation.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// FromMicros converts a stored time back, in UTC.
func FromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
