-- +goose Up
-- Eval experiments (SPEC §7.2, §7.5). A run record also keeps its reward,
-- latency, token usage and the harness's artifacts, so that reports and
-- comparisons need no blob reads; finished_us is when it got its
-- classification.
ALTER TABLE runs ADD COLUMN score DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN latency_ms DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN usage TEXT;          -- JSON {prompt_tokens, completion_tokens, cost_usd}
ALTER TABLE runs ADD COLUMN artifacts TEXT;      -- JSON, RunStatus.artifacts
ALTER TABLE runs ADD COLUMN finished_us BIGINT;
CREATE INDEX runs_tenant ON runs (tenant_id, experiment_id);

-- +goose Down
DROP INDEX runs_tenant;
ALTER TABLE runs DROP COLUMN finished_us;
ALTER TABLE runs DROP COLUMN artifacts;
ALTER TABLE runs DROP COLUMN usage;
ALTER TABLE runs DROP COLUMN latency_ms;
ALTER TABLE runs DROP COLUMN score;
