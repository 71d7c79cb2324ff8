-- +goose Up
-- Datasets (SPEC §9). The placeholder table of 00001 was never written;
-- a dataset is now a row with its build state and its frozen members.
DROP TABLE datasets;

CREATE TABLE datasets (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    agent_id     TEXT NOT NULL,
    format       TEXT NOT NULL,
    filters      TEXT NOT NULL,             -- JSON, as the creator asked
    holdout      TEXT NOT NULL,             -- JSON array of held-out task ids
    state        TEXT NOT NULL,             -- building | ready | failed
    reason       TEXT,                      -- why it failed
    members      INTEGER NOT NULL,          -- frozen rollout count
    file_sha256  TEXT,
    file_bytes   BIGINT,
    blob_key     TEXT,
    manifest     TEXT,                      -- JSON, once built
    created_us   BIGINT NOT NULL,
    built_us     BIGINT
);
CREATE INDEX datasets_tenant ON datasets (tenant_id, id);

-- A dataset's frozen membership: each selected rollout with the verdict
-- set, training grade and reward it had when the dataset was created, so
-- a later regrade never changes the file.
CREATE TABLE dataset_rollouts (
    dataset_id      TEXT NOT NULL REFERENCES datasets(id),
    rollout_id      TEXT NOT NULL,
    batch_id        TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    group_id        TEXT NOT NULL,
    verdicts        TEXT,                   -- JSON array, null when ungraded
    grader_versions TEXT,                   -- JSON array, null when ungraded
    training_grade  INTEGER,                -- null: pending at creation
    not_training_grade TEXT,                -- JSON array of reason codes
    reward          REAL,
    PRIMARY KEY (dataset_id, rollout_id)
);
CREATE INDEX dataset_rollouts_group ON dataset_rollouts (dataset_id, group_id, rollout_id);
-- Selecting by submission time.
CREATE INDEX rollouts_agent_submitted ON rollouts (tenant_id, agent_id, submitted_us) WHERE submitted_us IS NOT NULL;

-- +goose Down
DROP INDEX rollouts_agent_submitted;
DROP TABLE dataset_rollouts;
DROP TABLE datasets;
CREATE TABLE datasets (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    agent_id    TEXT NOT NULL,
    format      TEXT NOT NULL,
    params      TEXT NOT NULL,
    rollout_ids TEXT NOT NULL,
    manifest    TEXT,
    created_us  BIGINT NOT NULL
);
