-- +goose Up
-- A rollout's calls are numbered in the order they arrived, not the order
-- their records were written: a call that finishes after a later one
-- (a long stream beside a short request, or the last bytes of a stream
-- racing the client's next request) still takes its own place, so a
-- tool_call_id joins to the completion before the request that consumed
-- it (SPEC §6.2). received_us orders calls; arrival, the replica's count
-- of requests at this one's arrival, orders those received in the same
-- microsecond on one replica. seq keeps the order of writing and breaks
-- what ties remain.
ALTER TABLE gateway_calls ADD COLUMN arrival BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE gateway_calls DROP COLUMN arrival;
