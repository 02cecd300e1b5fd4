-- name: experiment_scoring_get :one
-- An experiment's repetitions and the scoring round its summaries read.
SELECT e.id, e.repetitions, e.scoring_round
FROM experiments e
WHERE e.id = %(experiment_id)s;

-- name: run_keys_for_experiment :many
-- Every run of an experiment: its case and repetition, its state (a failed run is not
-- judged; an errored one was never run) and, for those, why.
SELECT r.id AS run_id, r.case_id, r.repetition, r.state,
       CASE WHEN r.state IN ('failed', 'errored') THEN r.error END AS error
FROM runs r
WHERE r.experiment_id = %(experiment_id)s
ORDER BY r.id;

-- name: score_columns_for_experiment :many
-- The scores of an experiment's runs in the given round, one row per score name with a
-- column of each field the statistics read (50,000 rows of 10,000 runs come back as a
-- handful of arrays, in no particular order, the same in every column): whether the row
-- is a gauge's, was skipped, carries an error; raw only where it is read, a gauge's JSON
-- number, as text.
SELECT s.name,
       array_agg(s.run_id) AS run_ids,
       array_agg(s.value) AS vals,
       array_agg(s.kind = 'gauge') AS gauge,
       array_agg(s.skipped IS NOT NULL) AS skipped,
       array_agg(COALESCE(s.error, '') <> '') AS errored,
       array_agg(CASE WHEN s.kind = 'gauge' AND jsonb_typeof(s.raw) = 'number'
                      THEN s.raw #>> '{}' END) AS raws
FROM runs r
JOIN scores s ON s.run_id = r.id AND s.round = %(round)s
WHERE r.experiment_id = %(experiment_id)s
GROUP BY s.name;
