-- +goose Up
-- Regrading (SPEC §8). A verdict set says where its graders came from:
-- the task's (or case's) frozen graders, "task", or a regrade request's,
-- "request", whose compiled graders it keeps. A run record keeps what it
-- was graded with — the case's compiled graders, its input and the grader
-- versions of its verdicts — so `gyre eval regrade` can grade it again
-- without the suite file and without re-running the harness.
ALTER TABLE verdict_sets ADD COLUMN source TEXT NOT NULL DEFAULT 'task';
ALTER TABLE verdict_sets ADD COLUMN graders TEXT;
ALTER TABLE runs ADD COLUMN graders TEXT;
ALTER TABLE runs ADD COLUMN input TEXT;
ALTER TABLE runs ADD COLUMN grader_versions TEXT;

-- +goose Down
ALTER TABLE runs DROP COLUMN grader_versions;
ALTER TABLE runs DROP COLUMN input;
ALTER TABLE runs DROP COLUMN graders;
ALTER TABLE verdict_sets DROP COLUMN graders;
ALTER TABLE verdict_sets DROP COLUMN source;
