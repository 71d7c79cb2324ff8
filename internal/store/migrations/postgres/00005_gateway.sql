-- +goose Up
-- The LLM gateway (SPEC §6): what each call forwarded and cost, when a
-- replica first touched a rollout, and when grading sealed a rollout for
-- reconciliation (§6.3).
ALTER TABLE gateway_calls ADD COLUMN upstream TEXT;
ALTER TABLE gateway_calls ADD COLUMN model TEXT;
ALTER TABLE gateway_calls ADD COLUMN total_tokens BIGINT;
-- The production traffic of an agent (rollout_id NULL), newest first.
CREATE INDEX gateway_calls_production ON gateway_calls (tenant_id, agent_id, received_us) WHERE rollout_id IS NULL;
ALTER TABLE gateway_touches ADD COLUMN created_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN started_us BIGINT NOT NULL DEFAULT 0;
-- gw_sealed_us is the lease clock at the first reconciliation attempt
-- after the output was accepted (the gateway token was already revoked):
-- a rollout is reconciled once every replica that touched it has flushed
-- through this time or is dead.
ALTER TABLE rollouts ADD COLUMN gw_sealed_us BIGINT;

-- +goose Down
ALTER TABLE rollouts DROP COLUMN gw_sealed_us;
ALTER TABLE replicas DROP COLUMN started_us;
ALTER TABLE gateway_touches DROP COLUMN created_us;
DROP INDEX gateway_calls_production;
ALTER TABLE gateway_calls DROP COLUMN total_tokens;
ALTER TABLE gateway_calls DROP COLUMN model;
ALTER TABLE gateway_calls DROP COLUMN upstream;
