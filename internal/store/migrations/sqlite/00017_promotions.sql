-- +goose Up
-- Promotions (SPEC §10): one durable job per promotion compares a
-- candidate policy with a baseline over the same tasks, one batch per
-- side, and decides once. At most one promotion of an agent runs at a
-- time: the partial unique index enforces it atomically on both engines.
CREATE TABLE promotions (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL REFERENCES tenants(id),
    agent_id           TEXT NOT NULL,
    candidate          TEXT NOT NULL,
    baseline           TEXT NOT NULL,
    -- The agent's promoted policy when the promotion started (null: none);
    -- promoting compares-and-sets against it.
    expected_policy    TEXT,
    suite              TEXT,
    suite_version      TEXT,
    task_ids           TEXT NOT NULL,       -- JSON array, the tasks both sides run
    repetitions        INTEGER NOT NULL,
    min_delta          REAL NOT NULL,
    max_excluded_rate  REAL NOT NULL,
    deadline_s         REAL NOT NULL,
    seed               BIGINT NOT NULL,
    state              TEXT NOT NULL,       -- running | promoted | rejected | failed
    reasons            TEXT NOT NULL,       -- JSON array of reason codes
    baseline_batch_id  TEXT,
    candidate_batch_id TEXT,
    evidence           TEXT,                -- JSON, once decided
    created_by         TEXT NOT NULL,
    created_us         BIGINT NOT NULL,
    deadline_us        BIGINT NOT NULL,
    decided_us         BIGINT
);
CREATE INDEX promotions_tenant ON promotions (tenant_id, id);
CREATE UNIQUE INDEX promotions_one_running ON promotions (tenant_id, agent_id) WHERE state = 'running';

-- A promotion's batches carry its id and their side.
ALTER TABLE batches ADD COLUMN promotion_id TEXT;
ALTER TABLE batches ADD COLUMN promotion_side TEXT;
CREATE INDEX batches_promotion ON batches (promotion_id) WHERE promotion_id IS NOT NULL;

-- +goose Down
DROP INDEX batches_promotion;
ALTER TABLE batches DROP COLUMN promotion_side;
ALTER TABLE batches DROP COLUMN promotion_id;
DROP TABLE promotions;
