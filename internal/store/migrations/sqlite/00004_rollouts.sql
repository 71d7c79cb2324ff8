-- +goose Up
-- Claim order is (queue_seq = the batch's creation time, batch_id,
-- queue_pos = the rollout's place in its batch, task by task), so the
-- oldest batch goes first and a task's group is claimed together. A retry
-- keeps its parent's place.
ALTER TABLE rollouts ADD COLUMN queue_pos INTEGER NOT NULL DEFAULT 0;
DROP INDEX rollouts_claimable;
CREATE INDEX rollouts_claimable ON rollouts (tenant_id, agent_id, queue_seq, batch_id, queue_pos) WHERE state = 'queued';
-- The watchdog's deadline sweep.
CREATE INDEX rollouts_leased_deadline ON rollouts (deadline_us) WHERE state = 'leased';
CREATE INDEX rollouts_gateway_calls ON gateway_calls (rollout_id, counted);
ALTER TABLE batches ADD COLUMN task_ids TEXT NOT NULL DEFAULT '[]';
-- A job's claim token, so a finished job is removed only by the claim
-- that ran it (a re-enqueue while it runs makes it due again).
ALTER TABLE jobs ADD COLUMN claim_token TEXT;
CREATE INDEX verdict_sets_tenant ON verdict_sets (tenant_id, subject_kind, subject_id);

-- +goose Down
DROP INDEX verdict_sets_tenant;
ALTER TABLE jobs DROP COLUMN claim_token;
ALTER TABLE batches DROP COLUMN task_ids;
DROP INDEX rollouts_gateway_calls;
DROP INDEX rollouts_leased_deadline;
DROP INDEX rollouts_claimable;
ALTER TABLE rollouts DROP COLUMN queue_pos;
CREATE INDEX rollouts_claimable ON rollouts (tenant_id, agent_id, queue_seq) WHERE state = 'queued';
