package store

// CatalogStore keeps what rollouts are made from: fixtures, suite versions
// and tasks (SPEC §4.2).
type CatalogStore interface {
}
