package store

import (
	"context"
	"time"
)

// Harness is a registered Harness API v1 server of a tenant (SPEC §4.8,
// §7.3). Its API key is never stored in clear: APIKeySealed is what
// package secret sealed, under the key APIKeyKID names.
type Harness struct {
	ID       string
	TenantID string
	// Name is unique in the tenant and follows the name grammar of SPEC §2.
	Name string
	// BaseURL is the harness's root (http or https, no query).
	BaseURL string
	// APIKeySealed is the sealed x-api-key (nonce and ciphertext); nil
	// when the harness takes no key. APIKeyKID names the secret key that
	// sealed it, "" when there is none.
	APIKeySealed []byte
	APIKeyKID    string
	CreatedAt    time.Time
	// CreatedBy says who registered it: "key <key id>".
	CreatedBy string
}

// HarnessStore keeps the harness registry. Every method acts in one
// tenant; a foreign or unknown id is ErrNotFound.
type HarnessStore interface {
	// CreateHarness registers h (ID minted by the caller, a UUIDv7) unless
	// its name exists in the tenant; either way it returns the harness the
	// tenant now has under that name, and whether this call created it.
	// Comparing an existing harness with the request is the caller's rule.
	CreateHarness(ctx context.Context, h Harness) (out Harness, created bool, err error)
	// HarnessByID finds a harness of the tenant.
	HarnessByID(ctx context.Context, tenantID, id string) (Harness, error)
	// ListHarnesses lists the tenant's harnesses by name.
	ListHarnesses(ctx context.Context, tenantID string, p Page) (hs []Harness, next string, err error)
	// DeleteHarness removes a harness of the tenant, its sealed key with
	// it.
	DeleteHarness(ctx context.Context, tenantID, id string) error
}
