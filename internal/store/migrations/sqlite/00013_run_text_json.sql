-- +goose Up
-- Text a harness reports (run_id, model, answer, error; SPEC §7.2) may hold
-- any character, U+0000 included, which a PostgreSQL text value cannot. Such
-- columns keep the text as a JSON string literal, which escapes it, so it is
-- stored losslessly on every engine.
UPDATE runs SET run_id = json_quote(run_id) WHERE run_id IS NOT NULL;
UPDATE runs SET model = json_quote(model) WHERE model IS NOT NULL;
UPDATE runs SET answer = json_quote(answer) WHERE answer IS NOT NULL;
UPDATE runs SET error = json_quote(error) WHERE error IS NOT NULL;
UPDATE experiments SET model = json_quote(model) WHERE model IS NOT NULL;

-- +goose Down
UPDATE runs SET run_id = json_extract(run_id, '$') WHERE run_id IS NOT NULL;
UPDATE runs SET model = json_extract(model, '$') WHERE model IS NOT NULL;
UPDATE runs SET answer = json_extract(answer, '$') WHERE answer IS NOT NULL;
UPDATE runs SET error = json_extract(error, '$') WHERE error IS NOT NULL;
UPDATE experiments SET model = json_extract(model, '$') WHERE model IS NOT NULL;
