-- +goose Up
-- Completed batch groups in completion order (SPEC §9,
-- GET /batches/{id}/groups?complete=true). A group is complete when every
-- current (not replaced) rollout of it is decided: graded with its
-- training grade decided, or ended by the server (abandoned,
-- deadline_exceeded). A cancelled rollout keeps its group incomplete.
-- The trigger stamps the group in the very transaction that decides its
-- last rollout; it takes a transaction-scoped advisory lock before taking
-- a seq, so seqs become visible in increasing order and a follower paging
-- with ?after= never skips one. A stamp is never removed.
CREATE TABLE batch_group_completions (
    seq          BIGSERIAL PRIMARY KEY,
    batch_id     TEXT NOT NULL REFERENCES batches(id),
    group_id     TEXT NOT NULL,
    UNIQUE (batch_id, group_id)
);

-- Groups already complete before this migration, in group id order.
INSERT INTO batch_group_completions (batch_id, group_id)
SELECT batch_id, group_id FROM rollouts
GROUP BY batch_id, group_id
HAVING SUM(CASE WHEN replaced_by IS NULL AND NOT ((state = 'graded' AND training_grade IS NOT NULL)
        OR state IN ('abandoned', 'deadline_exceeded')) THEN 1 ELSE 0 END) = 0
ORDER BY batch_id, group_id;

-- +goose StatementBegin
CREATE FUNCTION rollouts_group_complete() RETURNS trigger AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.batch_id = NEW.batch_id AND r.group_id = NEW.group_id
            AND r.replaced_by IS NULL AND NOT ((r.state = 'graded' AND r.training_grade IS NOT NULL)
                OR r.state IN ('abandoned', 'deadline_exceeded')))
        AND NOT EXISTS (SELECT 1 FROM batch_group_completions c WHERE c.batch_id = NEW.batch_id AND c.group_id = NEW.group_id) THEN
        PERFORM pg_advisory_xact_lock(7461001600016);
        INSERT INTO batch_group_completions (batch_id, group_id) VALUES (NEW.batch_id, NEW.group_id)
            ON CONFLICT (batch_id, group_id) DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER rollouts_group_complete AFTER UPDATE ON rollouts
    FOR EACH ROW EXECUTE FUNCTION rollouts_group_complete();

-- +goose Down
DROP TRIGGER rollouts_group_complete ON rollouts;
DROP FUNCTION rollouts_group_complete();
DROP TABLE batch_group_completions;
