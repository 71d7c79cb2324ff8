-- +goose Up
-- Batch results (SPEC §4.8 GET /batches) are computed in SQL, so each
-- rollout keeps what its current verdict set decided: outcome (passed,
-- failed or unscored when every deciding grader abstained) and reward
-- (SPEC §9; NULL when no non-optional grader gave a score). Rollouts
-- graded before this migration keep NULL until they are graded again.
ALTER TABLE rollouts ADD COLUMN outcome TEXT;
ALTER TABLE rollouts ADD COLUMN reward REAL;
-- The rollout minted to replace this one: a retry, or a release's
-- re-queue. A replaced rollout is not a finished rollout of its batch.
ALTER TABLE rollouts ADD COLUMN replaced_by TEXT;
-- The SHA-256 of the JCS of the request body an Idempotency-Key was first
-- seen with, so the same key with another body is refused (SPEC §4.2).
-- NULL for keys remembered before this migration.
ALTER TABLE idempotency_keys ADD COLUMN request_sha256 TEXT;
-- GET /batches?agent_id, newest first.
CREATE INDEX batches_tenant_agent ON batches (tenant_id, agent_id, id);

-- +goose Down
DROP INDEX batches_tenant_agent;
ALTER TABLE idempotency_keys DROP COLUMN request_sha256;
ALTER TABLE rollouts DROP COLUMN replaced_by;
ALTER TABLE rollouts DROP COLUMN reward;
ALTER TABLE rollouts DROP COLUMN outcome;
