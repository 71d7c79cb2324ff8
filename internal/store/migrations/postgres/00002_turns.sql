-- +goose Up
-- GET /api/v1/turns lists a tenant's turns in order of receipt
-- (received_us, then seq), filtered by agent, conversation or both, and
-- pages by that order; each filter gets an index that serves it in that
-- order. turns_received (tenant_id, received_us, seq) already serves the
-- unfiltered list and ?since. The conversation index replaces
-- turns_conversation, which ordered by seq alone.
CREATE INDEX turns_agent_received ON turns (tenant_id, agent_id, received_us, seq);
CREATE INDEX turns_conversation_received ON turns (tenant_id, conversation_id, received_us, seq)
    WHERE conversation_id IS NOT NULL;
DROP INDEX turns_conversation;

-- +goose Down
CREATE INDEX turns_conversation ON turns (tenant_id, agent_id, conversation_id, seq);
DROP INDEX turns_conversation_received;
DROP INDEX turns_agent_received;
