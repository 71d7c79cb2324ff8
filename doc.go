// Package gyre holds the domain of the gyre control plane: the types every
// other package shares (tenants, keys, roles) and the one error type whose
// codes map to HTTP statuses. It imports only the standard library, so that
// adapters (stores, HTTP, CLI) depend on it and never on each other.
package gyre
