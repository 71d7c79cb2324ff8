-- +goose Up
-- Completed batch groups in completion order (SPEC §9,
-- GET /batches/{id}/groups?complete=true). A group is complete when every
-- current (not replaced) rollout of it is decided: graded with its
-- training grade decided, or ended by the server (abandoned,
-- deadline_exceeded). A cancelled rollout keeps its group incomplete.
-- The trigger stamps the group in the very transaction that decides its
-- last rollout, so seq is assigned atomically and in commit order (SQLite
-- has one writer). A retry is inserted after the update that ended the
-- attempt it replaces, in the same transaction: the insert trigger takes
-- back the stamp that update made, so no reader ever sees it. A group
-- never gets a rollout once it completed, so no committed stamp is taken
-- back.
CREATE TABLE batch_group_completions (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE TRIGGER rollouts_group_complete AFTER UPDATE OF state, training_grade, replaced_by ON rollouts
WHEN NEW.replaced_by IS NULL AND ((NEW.state = 'graded' AND NEW.training_grade IS NOT NULL)
        OR NEW.state IN ('abandoned', 'deadline_exceeded'))
BEGIN
    INSERT OR IGNORE INTO batch_group_completions (batch_id, group_id)
    SELECT NEW.batch_id, NEW.group_id
    WHERE NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.batch_id = NEW.batch_id AND r.group_id = NEW.group_id
        AND r.replaced_by IS NULL AND NOT ((r.state = 'graded' AND r.training_grade IS NOT NULL)
            OR r.state IN ('abandoned', 'deadline_exceeded')));
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER rollouts_group_reopened AFTER INSERT ON rollouts
BEGIN
    DELETE FROM batch_group_completions WHERE batch_id = NEW.batch_id AND group_id = NEW.group_id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER rollouts_group_reopened;
DROP TRIGGER rollouts_group_complete;
DROP INDEX rollouts_batch_group;
DROP TABLE batch_group_completions;
