-- +goose Up
-- Completed batch groups in completion order (SPEC §9,
-- GET /batches/{id}/groups?complete=true). A group is complete when every
-- current (not replaced) rollout of it is decided: graded with its
-- training grade decided, or ended by the server (abandoned,
-- deadline_exceeded). A cancelled rollout keeps its group incomplete.
-- The trigger stamps the group in the very transaction that decides its
-- last rollout; it takes a transaction-scoped advisory lock on the batch
-- before checking and taking a seq, so a batch's seqs become visible in
-- increasing order (a follower paging with ?after= never skips one) and
-- two rollouts of a group decided at once still complete it. A retry is inserted after the update that
-- ended the attempt it replaces, in the same transaction: the insert
-- trigger takes back the stamp that update made, so no reader ever sees
-- it. A group never gets a rollout once it completed, so no committed
-- stamp is taken back.
CREATE TABLE batch_group_completions (
    seq          BIGSERIAL PRIMARY KEY,
    batch_id     TEXT NOT NULL REFERENCES batches(id),
    group_id     TEXT NOT NULL,
    UNIQUE (batch_id, group_id)
);

CREATE INDEX rollouts_batch_group ON rollouts (batch_id, group_id);

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
    -- Lock the batch first: the check below then runs on a snapshot taken
    -- after any other transaction deciding a rollout of this batch has
    -- committed, so two rollouts of a group decided at once still stamp
    -- it (the second to take the lock sees the first's rollout decided).
    PERFORM pg_advisory_xact_lock(hashtextextended('batch_group_completions:' || NEW.batch_id, 0));
    IF NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.batch_id = NEW.batch_id AND r.group_id = NEW.group_id
            AND r.replaced_by IS NULL AND NOT ((r.state = 'graded' AND r.training_grade IS NOT NULL)
                OR r.state IN ('abandoned', 'deadline_exceeded'))) THEN
        INSERT INTO batch_group_completions (batch_id, group_id) VALUES (NEW.batch_id, NEW.group_id)
            ON CONFLICT (batch_id, group_id) DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER rollouts_group_complete AFTER UPDATE OF state, training_grade, replaced_by ON rollouts
    FOR EACH ROW WHEN (NEW.replaced_by IS NULL AND ((NEW.state = 'graded' AND NEW.training_grade IS NOT NULL)
        OR NEW.state IN ('abandoned', 'deadline_exceeded')))
    EXECUTE FUNCTION rollouts_group_complete();

-- +goose StatementBegin
CREATE FUNCTION rollouts_group_reopened() RETURNS trigger AS $$
BEGIN
    DELETE FROM batch_group_completions WHERE batch_id = NEW.batch_id AND group_id = NEW.group_id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER rollouts_group_reopened AFTER INSERT ON rollouts
    FOR EACH ROW EXECUTE FUNCTION rollouts_group_reopened();

-- +goose Down
DROP TRIGGER rollouts_group_reopened ON rollouts;
DROP FUNCTION rollouts_group_reopened();
DROP TRIGGER rollouts_group_complete ON rollouts;
DROP FUNCTION rollouts_group_complete();
DROP INDEX rollouts_batch_group;
DROP TABLE batch_group_completions;
