-- +goose Up
-- The calls judge graders make (SPEC §8), kept apart from gateway_calls so
-- that they are never one of a rollout's gateway calls, never production
-- traffic and never counted against a batch's budgets or limits. A judge
-- verdict links to its calls by id.
CREATE TABLE grading_calls (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    subject_kind  TEXT NOT NULL,          -- rollout | run
    subject_id    TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    policy        TEXT NOT NULL,
    upstream      TEXT NOT NULL,
    model         TEXT NOT NULL,
    status        INTEGER NOT NULL,       -- 0 when no answer arrived
    error         TEXT,
    request       BYTEA NOT NULL,         -- the JSON body sent upstream
    response      BYTEA,                  -- the body received, capped
    usage         TEXT,                   -- JSON
    started_us    BIGINT NOT NULL,
    done_us       BIGINT NOT NULL
);
CREATE INDEX grading_calls_subject ON grading_calls (tenant_id, subject_kind, subject_id, started_us);

-- +goose Down
DROP INDEX grading_calls_subject;
DROP TABLE grading_calls;
