-- name: schedule_insert :one
-- A new schedule; next_fire_at is its first cron slot after now.
INSERT INTO schedules (workspace_id, name, dataset_id, agent_id, cron, split, case_ids,
                       repetitions, model, created_by, next_fire_at)
VALUES (%(workspace_id)s, %(name)s, %(dataset_id)s, %(agent_id)s, %(cron)s, %(split)s,
        %(case_ids)s, %(repetitions)s, %(model)s, %(created_by)s, %(next_fire_at)s)
RETURNING id;

-- name: schedule_list :many
-- Schedules with their latest experiment's status and run counts by state; one workspace
-- when workspace_id is set, one schedule when schedule_id is set.
SELECT s.id, s.name, w.name AS workspace, d.name AS dataset, dw.name AS dataset_workspace,
       a.name AS agent, aw.name AS agent_workspace, s.cron, s.split, s.case_ids,
       s.repetitions, s.model, s.created_at, u.username AS created_by_name,
       s.next_fire_at, s.last_fire_at, s.fires, s.last_error,
       e.id AS latest_id, e.status AS latest_status, e.created_at AS latest_created_at,
       e.finished_at AS latest_finished_at, e.summary AS latest_summary,
       (SELECT COALESCE(jsonb_object_agg(c.state, c.n), '{}')
        FROM (SELECT state, count(*) AS n FROM runs r
              WHERE r.experiment_id = e.id GROUP BY state) c) AS latest_by_state
FROM schedules s
JOIN workspaces w ON w.id = s.workspace_id
JOIN datasets d ON d.id = s.dataset_id
JOIN workspaces dw ON dw.id = d.workspace_id
JOIN agents a ON a.id = s.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
LEFT JOIN users u ON u.id = s.created_by
LEFT JOIN experiments e ON e.id = s.latest_experiment_id
WHERE (%(workspace_id)s::bigint IS NULL OR s.workspace_id = %(workspace_id)s)
  AND (%(schedule_id)s::bigint IS NULL OR s.id = %(schedule_id)s)
ORDER BY w.name, s.name;

-- name: schedule_get_id :one
-- The id of a schedule by workspace and name.
SELECT id FROM schedules WHERE workspace_id = %(workspace_id)s AND name = %(name)s;

-- name: schedule_get_workspace :one
-- The workspace a schedule lives in, for the access check before a delete.
SELECT w.name AS workspace FROM schedules s JOIN workspaces w ON w.id = s.workspace_id
WHERE s.id = %(schedule_id)s;

-- name: schedule_delete :one
-- Delete a schedule; the experiments it started stay.
DELETE FROM schedules WHERE id = %(schedule_id)s RETURNING id;

-- name: schedule_list_due :many
-- Schedules whose next slot has come, with what starting their experiment needs: the
-- dataset and agent as name@workspace and the creator it fires as.
SELECT s.id, s.name, w.name AS workspace, s.cron, s.next_fire_at,
       d.name AS dataset, dw.name AS dataset_workspace,
       a.name AS agent, aw.name AS agent_workspace,
       s.split, s.case_ids, s.repetitions, s.model,
       s.created_by, u.username AS created_by_name, u.is_admin AS created_by_admin,
       u.disabled_at AS created_by_disabled_at
FROM schedules s
JOIN workspaces w ON w.id = s.workspace_id
JOIN datasets d ON d.id = s.dataset_id
JOIN workspaces dw ON dw.id = d.workspace_id
JOIN agents a ON a.id = s.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
LEFT JOIN users u ON u.id = s.created_by
WHERE s.next_fire_at <= %(now)s
ORDER BY s.next_fire_at, s.id;

-- name: schedule_claim :one
-- Claim the slot a tick saw as due (compare-and-set on next_fire_at): of two workers that
-- saw it, one gets the row back and starts the experiment, the other gets nothing.
UPDATE schedules
SET last_fire_at = %(slot)s, next_fire_at = %(next_fire_at)s, fires = fires + 1
WHERE id = %(schedule_id)s AND next_fire_at = %(due)s
RETURNING id;

-- name: schedule_record_fire :exec
-- What the claimed fire did: the experiment it started, or why it started none.
UPDATE schedules
SET latest_experiment_id = COALESCE(%(experiment_id)s, latest_experiment_id),
    last_error = %(error)s
WHERE id = %(schedule_id)s;
