-- +goose Up
-- POST /api/v1/tasks/from-turns with skip_existing asks, for each selected
-- turn, whether a task was already made from it.
CREATE INDEX tasks_source_turn ON tasks (tenant_id, source_agent_id, source_turn_id)
    WHERE source_turn_id IS NOT NULL;

-- +goose Down
DROP INDEX tasks_source_turn;
