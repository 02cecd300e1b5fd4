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
-- the value that score has in the experiment's current scoring round.
SELECT r.id AS run_id, r.case_id, s.name, s.value AS scored, l.user_id AS labeller,
       l.value AS labelled
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN scores s ON s.run_id = r.id AND s.round = e.scoring_round AND s.kind = 'evaluator'
              AND s.value IS NOT NULL
JOIN LATERAL (SELECT DISTINCT ON (x.user_id) x.user_id, x.value
              FROM labels x WHERE x.run_id = r.id AND x.name = s.name
              ORDER BY x.user_id, x.id DESC) l ON true
WHERE r.experiment_id = %(experiment_id)s
ORDER BY s.name, r.id;
