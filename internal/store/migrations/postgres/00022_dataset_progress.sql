-- +goose Up
-- A dataset build's progress, for GET /api/v1/datasets/{id} and the CLI's
-- progress bar: the frozen rollouts read and the rows written so far by
-- the build that holds the dataset's job. Null until a build starts; a
-- rebuild starts again from 0.
ALTER TABLE datasets ADD COLUMN progress_rollouts BIGINT;
ALTER TABLE datasets ADD COLUMN progress_rows BIGINT;

-- +goose Down
ALTER TABLE datasets DROP COLUMN progress_rows;
ALTER TABLE datasets DROP COLUMN progress_rollouts;
