// Package cli is the gyre command line: cobra commands for serve, the
// operator commands (migrate, tenants, keys), version, and the admin
// commands that drive a running server over its HTTP API (suites, tasks,
// batches, rollouts, turns, policy, agents, dataset; one file per
// resource, sharing admin.go's flags and adminpage.go's paging). It is the only
// package that reads flags, the environment and config files; it turns
// them into a Config (flags > GYRE_* environment > --config file >
// defaults, SPEC §2) and wires the store, the API server and telemetry
// together. Results go to stdout, diagnostics to stderr; the exit code is
// 0 on success, 1 when a command fails and 2 for usage errors.
package cli
