package store

// RolloutStore keeps batches and rollouts and runs their state machine
// (SPEC §4.2–§4.7): claims, leases, heartbeats, outputs, the watchdog.
type RolloutStore interface {
}
