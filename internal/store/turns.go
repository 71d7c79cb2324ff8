package store

// TurnStore keeps production turns (SPEC §4.1): evidence, never training rows.
type TurnStore interface {
}
