-- +goose Up
-- The catalog (SPEC §4.2). A fixture name's latest revision, and a suite's
-- latest version, is the one most recently put: put_seq grows by one per
-- put of the name (a re-put of identical content makes that revision the
-- latest again), so "latest" never depends on two puts landing in
-- different microseconds.
ALTER TABLE fixtures ADD COLUMN put_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX fixtures_put ON fixtures (tenant_id, name, put_seq);

ALTER TABLE suite_versions ADD COLUMN put_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX suite_versions_put ON suite_versions (tenant_id, name, put_seq);

-- GET /api/v1/tasks?suite=
CREATE INDEX tasks_suite ON tasks (tenant_id, suite_name, id);

-- +goose Down
DROP INDEX tasks_suite;
DROP INDEX suite_versions_put;
ALTER TABLE suite_versions DROP COLUMN put_seq;
DROP INDEX fixtures_put;
ALTER TABLE fixtures DROP COLUMN put_seq;
