-- +goose Up
-- The history of an agent's promoted policy (SPEC §10): who set it, when,
-- through which promotion. agents.promoted_policy stays the current one,
-- changed in the same transaction as the history. A rollback marks the
-- newest live entry rolled back instead of deleting it, so the history
-- keeps every change.
CREATE TABLE agent_policy_history (
    tenant_id       TEXT NOT NULL,
    agent_id        TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    policy          TEXT NOT NULL,
    set_by          TEXT NOT NULL,
    set_us          BIGINT NOT NULL,
    promotion_id    TEXT,
    rolled_back_us  BIGINT,
    rolled_back_by  TEXT,
    PRIMARY KEY (tenant_id, agent_id, seq),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, agent_id)
);
-- A promoted policy set before the history existed becomes its first entry.
INSERT INTO agent_policy_history (tenant_id, agent_id, seq, policy, set_by, set_us)
    SELECT tenant_id, agent_id, 1, promoted_policy, 'migration', first_seen_us
    FROM agents WHERE promoted_policy IS NOT NULL;

-- +goose Down
DROP TABLE agent_policy_history;
