-- +goose Up
-- The gateway serves three wire protocols (SPEC §6.1): OpenAI Chat
-- Completions, the OpenAI Responses API and the Anthropic Messages API.
-- Each call records the one it arrived on; calls recorded before there was
-- a choice were all chat.
ALTER TABLE gateway_calls ADD COLUMN protocol TEXT NOT NULL DEFAULT 'chat';
-- A Responses answer's id, which a later request of the same rollout may
-- name as its previous_response_id: the gateway resolves it only through
-- the rollout's own records.
ALTER TABLE gateway_calls ADD COLUMN response_id TEXT;
CREATE INDEX gateway_calls_response ON gateway_calls (rollout_id, response_id) WHERE response_id IS NOT NULL;

-- +goose Down
DROP INDEX gateway_calls_response;
ALTER TABLE gateway_calls DROP COLUMN response_id;
ALTER TABLE gateway_calls DROP COLUMN protocol;
