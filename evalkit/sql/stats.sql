-- name: experiment_scoring_get :one
-- An experiment's repetitions and the scoring round its summaries read.
SELECT e.id, e.repetitions, e.scoring_round
FROM experiments e
WHERE e.id = %(experiment_id)s;

-- name: score_list_for_experiment :many
-- Every run of an experiment with its scores of the given round (a run without any score
-- comes once, with a null name).
SELECT r.id AS run_id, r.case_id, r.repetition,
       s.name, s.value, s.kind, s.skipped, s.error, s.raw
FROM runs r
LEFT JOIN scores s ON s.run_id = r.id AND s.round = %(round)s
WHERE r.experiment_id = %(experiment_id)s
ORDER BY r.case_id, r.repetition, r.id, s.name;
