-- +goose Up
-- Text a harness reports (run_id, model, answer, error; SPEC §7.2) may hold
-- any character, U+0000 included, which a PostgreSQL text value cannot. Such
-- columns keep the text as a JSON string literal, which escapes it, so it is
-- stored losslessly on every engine.
UPDATE runs SET run_id = to_json(run_id)::text WHERE run_id IS NOT NULL;
UPDATE runs SET model = to_json(model)::text WHERE model IS NOT NULL;
UPDATE runs SET answer = to_json(answer)::text WHERE answer IS NOT NULL;
UPDATE runs SET error = to_json(error)::text WHERE error IS NOT NULL;
UPDATE experiments SET model = to_json(model)::text WHERE model IS NOT NULL;

-- +goose Down
UPDATE runs SET run_id = run_id::json #>> '{}' WHERE run_id IS NOT NULL;
UPDATE runs SET model = model::json #>> '{}' WHERE model IS NOT NULL;
UPDATE runs SET answer = answer::json #>> '{}' WHERE answer IS NOT NULL;
UPDATE runs SET error = error::json #>> '{}' WHERE error IS NOT NULL;
UPDATE experiments SET model = model::json #>> '{}' WHERE model IS NOT NULL;
