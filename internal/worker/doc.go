// Package worker is the engine of gyre worker (SPEC §5): a flywheel.Handler
// that runs the team's agent as a subprocess per rollout.
//
// The claim loop, heartbeats, clock offset, drain and submission are
// flywheel.Serve's; this package owns what only a subprocess has:
//
//   - the child's environment, built from an allow-list (BaseEnv, the
//     operator's --env and --env-file names) plus gyre's own variables
//     for the rollout — never the worker's whole environment, its key, or
//     provider credentials it was not told to pass; the worker only ever
//     reads its own environment;
//   - the process: its own process group, the turn input written to stdin
//     asynchronously, stdout kept up to 1 MiB and the last 16 KiB of
//     stderr, SIGTERM when the rollout must stop and SIGKILL 10 s later,
//     and a final kill of whatever is left of the group;
//   - the report at GYRE_REPORT, read after exit (after a deadline kill
//     too) and ignored with an events entry when malformed;
//   - the exclusion mapping (deadline_exceeded, cancelled,
//     agent_exit_nonzero, entrypoint_error, the report's own);
//   - the artifacts, walked through os.Root without following symlinks.
package worker
