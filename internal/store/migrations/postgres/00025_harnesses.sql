-- +goose Up
-- The harness registry (SPEC §4.8, §7.3): a tenant's Harness API v1
-- servers, browsed by the web UI's sessions browser. A harness's API key is
-- kept only sealed: AES-256-GCM under a key derived from the operator's
-- GYRE_SECRET_KEY, with a random nonce per value, bound to the tenant and
-- the harness id; api_key_kid names the key that sealed it, so that a
-- rotation can find the values an old key sealed.
CREATE TABLE harnesses (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    name           TEXT NOT NULL,
    base_url       TEXT NOT NULL,
    api_key_sealed BYTEA,                      -- nonce || ciphertext; null: no key
    api_key_kid    TEXT,                    -- e.g. v1:<16 hex>; null: no key
    created_us     BIGINT NOT NULL,
    created_by     TEXT NOT NULL,           -- "key <key id>"
    UNIQUE (tenant_id, name)
);
CREATE INDEX harnesses_tenant ON harnesses (tenant_id, id);

-- +goose Down
DROP TABLE harnesses;
