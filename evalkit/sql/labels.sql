-- name: label_insert :one
-- One human reading of one score of one run; never replaces an earlier one.
INSERT INTO labels (run_id, name, value, comment, user_id)
VALUES (%(run_id)s, %(name)s, %(value)s, %(comment)s, %(user_id)s)
RETURNING id, created_at;

-- name: labels_list_by_run :many
-- A run's labels, oldest first, with who gave each (null once that user is deleted).
SELECT l.id, l.name, l.value, l.comment, u.username AS labelled_by, l.created_at
FROM labels l LEFT JOIN users u ON u.id = l.user_id
WHERE l.run_id = %(run_id)s
ORDER BY l.id;

-- name: run_label_target_get :one
-- What labelling a run needs: its experiment's workspace, and the score names it has
-- (evaluators only: a gauge is a measurement, not a verdict a person could second).
SELECT r.id, w.name AS workspace,
       ARRAY(SELECT DISTINCT s.name FROM scores s
             WHERE s.run_id = r.id AND s.kind = 'evaluator' ORDER BY s.name) AS score_names
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN workspaces w ON w.id = e.workspace_id
WHERE r.id = %(run_id)s;

-- name: agreement_readings_for_experiment :many
-- Each labeller's latest label of each evaluator score of the experiment's runs, beside
-- the value that score has in the experiment's current scoring round (or in %(round)s: a
-- judge alignment's trial round).
SELECT r.id AS run_id, r.case_id, s.name, s.value AS scored, l.user_id AS labeller,
       l.value AS labelled
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN scores s ON s.run_id = r.id AND s.round = COALESCE(%(round)s::integer, e.scoring_round)
              AND s.kind = 'evaluator' AND s.value IS NOT NULL
JOIN LATERAL (SELECT DISTINCT ON (x.user_id) x.user_id, x.value
              FROM labels x WHERE x.run_id = r.id AND x.name = s.name
              ORDER BY x.user_id, x.id DESC) l ON true
WHERE r.experiment_id = %(experiment_id)s
ORDER BY s.name, r.id;

-- name: label_queue_list :many
-- One page of the experiment's labelling queue: judge scores (the rubric judge, a library
-- judge) of its current round that have a value and no human label yet, in a stable order
-- (a hash of run and score name: the same sample on every reload, unrelated to case order).
SELECT r.id AS run_id, r.case_id, s.name, s.value, s.explanation, s.judge_model,
       s.prompt_hash, v.content, tv.content AS target_content
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN scores s ON s.run_id = r.id AND s.round = e.scoring_round AND s.value IS NOT NULL
              AND (s.evaluator = 'judge' OR starts_with(s.evaluator, 'judge:'))
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
WHERE r.experiment_id = %(experiment_id)s
  AND (%(name)s::text IS NULL OR s.name = %(name)s)
  AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.run_id = r.id AND l.name = s.name)
ORDER BY md5(r.id::text || '/' || s.name), r.id, s.name
LIMIT %(limit)s OFFSET %(offset)s;

-- name: label_queue_count :one
-- How many entries the experiment's labelling queue holds (see label_queue_list).
SELECT count(*) AS total
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN scores s ON s.run_id = r.id AND s.round = e.scoring_round AND s.value IS NOT NULL
              AND (s.evaluator = 'judge' OR starts_with(s.evaluator, 'judge:'))
WHERE r.experiment_id = %(experiment_id)s
  AND (%(name)s::text IS NULL OR s.name = %(name)s)
  AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.run_id = r.id AND l.name = s.name);
