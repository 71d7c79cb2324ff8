-- +goose Up
-- Reading back what was recorded (SPEC §4.8): GET /api/v1/calls lists a
-- tenant's production calls in order of receipt, with or without an
-- agent_id, and GET /api/v1/blobs/{sha256} finds a fixture revision of
-- the tenant by its digest alone.
CREATE INDEX gateway_calls_production_receipt ON gateway_calls (tenant_id, received_us, arrival, id) WHERE rollout_id IS NULL;
CREATE INDEX gateway_calls_production_agent ON gateway_calls (tenant_id, agent_id, received_us, arrival, id) WHERE rollout_id IS NULL;
CREATE INDEX fixtures_sha256 ON fixtures (tenant_id, sha256);

-- +goose Down
DROP INDEX fixtures_sha256;
DROP INDEX gateway_calls_production_agent;
DROP INDEX gateway_calls_production_receipt;
