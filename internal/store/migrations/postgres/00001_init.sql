-- +goose Up
-- gyre's data model (SPEC §3–§10). Times are microseconds since the Unix
-- epoch (UTC) in BIGINT columns named *_us, so both engines compare them
-- the same way. JSON is stored as TEXT, byte for byte as gyre wrote it:
-- jsonb would reorder keys and rewrite numbers.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_us  BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL DEFAULT '',
    role        TEXT NOT NULL,
    agent_ids   TEXT,                       -- JSON array, NULL = every agent
    key_hash    BYTEA NOT NULL UNIQUE,      -- SHA-256 of the secret
    created_us  BIGINT NOT NULL,
    revoked_us  BIGINT
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);

CREATE TABLE agents (
    tenant_id        TEXT NOT NULL REFERENCES tenants(id),
    agent_id         TEXT NOT NULL,
    promoted_policy  TEXT,
    first_seen_us    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
);

-- Production turns: evidence, never training rows (SPEC §4.1).
CREATE TABLE turns (
    seq              BIGSERIAL PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants(id),
    agent_id         TEXT NOT NULL,
    turn_id          TEXT NOT NULL,
    conversation_id  TEXT,
    task_id          TEXT,
    body             TEXT NOT NULL,         -- the turn as sent
    body_sha256      TEXT NOT NULL,         -- of its JCS form
    occurred_at      TEXT,                  -- the customer's claim, as sent
    received_us      BIGINT NOT NULL,
    UNIQUE (tenant_id, agent_id, turn_id)
);
CREATE INDEX turns_conversation ON turns (tenant_id, agent_id, conversation_id, seq);
CREATE INDEX turns_received ON turns (tenant_id, received_us, seq);

CREATE TABLE fixtures (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    created_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, sha256)
);
CREATE INDEX fixtures_latest ON fixtures (tenant_id, name, created_us);

CREATE TABLE suite_versions (
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    name            TEXT NOT NULL,
    version         TEXT NOT NULL,
    content_sha256  TEXT NOT NULL,
    document        TEXT NOT NULL,          -- parsed suite, JSON
    cases           INTEGER NOT NULL,
    created_us      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    suite_name      TEXT,
    suite_version   TEXT,
    case_id         TEXT NOT NULL,
    input           TEXT NOT NULL,          -- JSON
    turn_input      TEXT NOT NULL,
    graders         TEXT NOT NULL,          -- compiled verifier suite, JSON, frozen
    source_agent_id TEXT,                   -- set for tasks made from turns
    source_turn_id  TEXT,
    created_us      BIGINT NOT NULL
);
CREATE INDEX tasks_tenant ON tasks (tenant_id, id);

CREATE TABLE policies (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    body        TEXT NOT NULL,              -- JSON, immutable
    body_sha256 TEXT NOT NULL,
    created_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE batches (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants(id),
    agent_id         TEXT NOT NULL,
    policy           TEXT,
    group_size       INTEGER NOT NULL,
    deadline_s       DOUBLE PRECISION NOT NULL,
    max_attempts     INTEGER NOT NULL,
    retry_on         TEXT NOT NULL,         -- JSON array of exclusion reasons
    limits           TEXT,                  -- JSON
    idempotency_key  TEXT,
    cancelled_us     BIGINT,
    created_us       BIGINT NOT NULL
);
CREATE INDEX batches_tenant ON batches (tenant_id, id);
CREATE UNIQUE INDEX batches_idempotency ON batches (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE rollouts (
    id                     TEXT PRIMARY KEY,
    tenant_id              TEXT NOT NULL REFERENCES tenants(id),
    agent_id               TEXT NOT NULL,
    batch_id               TEXT NOT NULL REFERENCES batches(id),
    task_id                TEXT NOT NULL REFERENCES tasks(id),
    group_id               TEXT NOT NULL,
    attempt                INTEGER NOT NULL,
    queue_seq              BIGINT NOT NULL, -- claim order: oldest batch, task by task (store-assigned)
    state                  TEXT NOT NULL,
    worker_id              TEXT,
    worker_version         TEXT,
    claim_idempotency_key  TEXT,
    created_us             BIGINT NOT NULL,
    claimed_us             BIGINT,
    lease_granted_us       BIGINT,
    lease_expires_us       BIGINT,
    deadline_us            BIGINT,
    lease_token_hash       BYTEA,
    gw_token_hash          BYTEA UNIQUE,
    gw_key_hash            BYTEA,
    gw_revoked_us          BIGINT,
    submitted_us           BIGINT,
    ended_us               BIGINT,
    output                 TEXT,            -- RolloutOutput after intake normalisation
    output_sha256          TEXT,
    exclusion_reason       TEXT,
    reconciliation         TEXT,
    reconciliation_reason  TEXT,
    server_fingerprint     TEXT,
    training_grade         BOOLEAN,
    not_training_grade     TEXT,            -- JSON array of reason codes
    graded_us              BIGINT
);
-- The claimable set: only queued rollouts are in this index.
CREATE INDEX rollouts_claimable ON rollouts (tenant_id, agent_id, queue_seq) WHERE state = 'queued';
-- The watchdog's sweep: only leased rollouts, by expiry.
CREATE INDEX rollouts_leased ON rollouts (lease_expires_us) WHERE state = 'leased';
CREATE INDEX rollouts_batch ON rollouts (batch_id, task_id, attempt);
CREATE INDEX rollouts_tenant ON rollouts (tenant_id, agent_id, id);

-- Durable work queue for grading, reconciliation and other server jobs.
CREATE TABLE jobs (
    id            BIGSERIAL PRIMARY KEY,
    kind          TEXT NOT NULL,
    subject_id    TEXT NOT NULL,
    run_after_us  BIGINT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    locked_by     TEXT,
    locked_until_us BIGINT,
    last_error    TEXT,
    created_us    BIGINT NOT NULL,
    UNIQUE (kind, subject_id)
);
CREATE INDEX jobs_due ON jobs (run_after_us, id);

-- One verdict set per grading; the latest is current (regrading keeps history).
CREATE TABLE verdict_sets (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    subject_kind    TEXT NOT NULL,          -- rollout | run
    subject_id      TEXT NOT NULL,
    verdicts        TEXT NOT NULL,          -- JSON array
    grader_versions TEXT NOT NULL,          -- JSON
    created_us      BIGINT NOT NULL
);
CREATE INDEX verdict_sets_subject ON verdict_sets (subject_kind, subject_id, created_us);

-- Gateway records (SPEC §6.2).
CREATE TABLE gateway_calls (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants(id),
    rollout_id        TEXT,                 -- NULL for production traffic
    agent_id          TEXT NOT NULL,
    seq               INTEGER NOT NULL,
    replica_id        TEXT NOT NULL,
    policy            TEXT,
    requested_model   TEXT,
    status            INTEGER NOT NULL,
    counted           BOOLEAN NOT NULL,
    reason            TEXT,
    stream            BOOLEAN NOT NULL,
    received_us       BIGINT NOT NULL,
    first_byte_us     BIGINT,
    done_us           BIGINT,
    request_blob      TEXT,
    response_blob     TEXT,
    usage             TEXT,                 -- JSON
    cost_usd          DOUBLE PRECISION,
    fingerprint       TEXT,                 -- JSON
    emitted_ids       TEXT NOT NULL,        -- JSON array
    consumed_ids      TEXT NOT NULL,        -- JSON array
    UNIQUE (rollout_id, seq)
);
CREATE INDEX gateway_calls_agent ON gateway_calls (tenant_id, agent_id, received_us);

CREATE TABLE gateway_touches (
    rollout_id  TEXT NOT NULL,
    replica_id  TEXT NOT NULL,
    PRIMARY KEY (rollout_id, replica_id)
);

CREATE TABLE replicas (
    id                 TEXT PRIMARY KEY,
    heartbeat_us       BIGINT NOT NULL,
    expires_us         BIGINT NOT NULL,
    flushed_through_us BIGINT NOT NULL
);

CREATE TABLE experiments (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    suite_name     TEXT NOT NULL,
    suite_version  TEXT NOT NULL,
    harness        TEXT NOT NULL,
    capabilities   TEXT NOT NULL,           -- JSON snapshot
    model          TEXT,
    config         TEXT NOT NULL,           -- JSON: flags that shaped the run
    summary        TEXT,                    -- JSON, set at finish
    created_us     BIGINT NOT NULL,
    finished_us    BIGINT
);
CREATE INDEX experiments_tenant ON experiments (tenant_id, id);

CREATE TABLE runs (
    experiment_id     TEXT NOT NULL REFERENCES experiments(id),
    case_id           TEXT NOT NULL,
    repetition        INTEGER NOT NULL,
    tenant_id         TEXT NOT NULL REFERENCES tenants(id),
    run_id            TEXT,                 -- the harness's id
    status            TEXT,
    classification    TEXT,
    timed_out         BOOLEAN NOT NULL DEFAULT FALSE,
    error             TEXT,
    model             TEXT,
    answer            TEXT,
    output            TEXT,                 -- JSON
    verdicts          TEXT,                 -- JSON array
    trajectory_blob   TEXT,
    trajectory        TEXT,                 -- JSON {valid, errors, schema_version}
    files             TEXT,                 -- JSON
    attempts          TEXT,                 -- JSON log of every attempt
    started_us        BIGINT,
    updated_us        BIGINT NOT NULL,
    PRIMARY KEY (experiment_id, case_id, repetition)
);

CREATE TABLE datasets (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    agent_id    TEXT NOT NULL,
    format      TEXT NOT NULL,
    params      TEXT NOT NULL,              -- JSON
    rollout_ids TEXT NOT NULL,              -- JSON array, frozen at creation
    manifest    TEXT,                       -- JSON
    created_us  BIGINT NOT NULL
);

-- Blobs a tenant uploaded through PUT /api/v1/blobs/{sha256}.
CREATE TABLE blob_refs (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    sha256      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    created_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, sha256)
);

-- Idempotency-Key records (batches, claims): a key seen within 24 h
-- returns the original answer.
CREATE TABLE idempotency_keys (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    response    TEXT NOT NULL,
    created_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, scope, key)
);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE blob_refs;
DROP TABLE datasets;
DROP TABLE runs;
DROP TABLE experiments;
DROP TABLE replicas;
DROP TABLE gateway_touches;
DROP TABLE gateway_calls;
DROP TABLE verdict_sets;
DROP TABLE jobs;
DROP TABLE rollouts;
DROP TABLE batches;
DROP TABLE policies;
DROP TABLE tasks;
DROP TABLE suite_versions;
DROP TABLE fixtures;
DROP TABLE turns;
DROP TABLE agents;
DROP TABLE api_keys;
DROP TABLE tenants;
