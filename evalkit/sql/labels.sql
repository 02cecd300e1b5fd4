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
