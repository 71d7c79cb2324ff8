-- +goose Up
-- Web UI sessions (SPEC §11): the SHA-256 of each session token, the key
-- it was exchanged for and its expiry. A session is live only while its
-- key is: readers join api_keys, so revoking the key ends it at once.
CREATE TABLE ui_sessions (
    token_hash  BYTEA PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    key_id      TEXT NOT NULL REFERENCES api_keys(id),
    created_us  BIGINT NOT NULL,
    expires_us  BIGINT NOT NULL
);
-- Expired sessions are deleted a few at a time, oldest expiry first.
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_us);
-- The web UI's rollouts table of a batch pages newest first by id.
CREATE INDEX rollouts_batch_id ON rollouts (batch_id, id);
-- A batch's state asks whether any of its rollouts is still queued, leased
-- or submitted: one probe of this index instead of reading the batch.
CREATE INDEX rollouts_batch_state ON rollouts (batch_id, state);

-- +goose Down
DROP INDEX rollouts_batch_state;
DROP INDEX rollouts_batch_id;
DROP INDEX ui_sessions_expires;
DROP TABLE ui_sessions;
