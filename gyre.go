package gyre

import (
	"slices"
	"time"
)

// Role is what an API key may do inside its tenant (SPEC §3).
type Role string

// The roles of SPEC §3. Each role grants exactly its own surface; admin
// grants everything in the tenant.
const (
	RoleAgent     Role = "agent"
	RoleInference Role = "inference"
	RoleEvaluator Role = "evaluator"
	RoleReader    Role = "reader"
	RoleAdmin     Role = "admin"
)

// Roles lists every role, in a stable order, for validation and help text.
var Roles = []Role{RoleAgent, RoleInference, RoleEvaluator, RoleReader, RoleAdmin}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// DefaultTenant is the tenant bootstrap creates on an empty SQLite store.
const DefaultTenant = "default"

// Tenant owns every other object; nothing crosses a tenant boundary.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey is a stored key. The secret itself is never kept: only its SHA-256.
type APIKey struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	Role     Role   `json:"role"`
	// AgentIDs limits an agent or inference key to these agent ids. nil
	// means no limit; an empty non-nil list is never stored.
	AgentIDs  []string   `json:"agent_ids"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// Revoked reports whether the key has been revoked.
func (k APIKey) Revoked() bool { return k.RevokedAt != nil }

// AllowsAgent reports whether the key may act for agentID. Keys without an
// allow-list may act for every agent in their tenant.
func (k APIKey) AllowsAgent(agentID string) bool {
	return k.AgentIDs == nil || slices.Contains(k.AgentIDs, agentID)
}

// Permits reports whether a key with role k.Role may use a surface that
// requires role want. Admin may do everything in its tenant; a reader may
// use every GET (callers pass RoleReader for those).
func (k APIKey) Permits(want Role) bool {
	if k.Role == RoleAdmin || k.Role == want {
		return true
	}
	return false
}
