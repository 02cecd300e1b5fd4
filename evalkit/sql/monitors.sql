-- name: monitor_insert :one
-- A new monitor of one agent, stored in the agent's workspace, at version 1.
INSERT INTO monitors (workspace_id, name, agent_id, sample_rate, cap_per_hour, builtins,
                      evaluator_ids, rubric, created_by)
VALUES (%(workspace_id)s, %(name)s, %(agent_id)s, %(sample_rate)s, %(cap_per_hour)s,
        %(builtins)s, %(evaluator_ids)s, %(rubric)s, %(created_by)s)
RETURNING id, version;

-- name: monitor_list :many
-- Monitors with their agent; one workspace when workspace_id is set, one agent when
-- agent_id is set.
SELECT m.id, m.name, w.name AS workspace, a.name AS agent, m.agent_id, m.version,
       m.sample_rate, m.cap_per_hour, m.builtins, m.evaluator_ids, m.rubric,
       m.created_at, m.updated_at
FROM monitors m
JOIN workspaces w ON w.id = m.workspace_id
JOIN agents a ON a.id = m.agent_id
WHERE (%(workspace_id)s::bigint IS NULL OR m.workspace_id = %(workspace_id)s)
  AND (%(agent_id)s::bigint IS NULL OR m.agent_id = %(agent_id)s)
ORDER BY w.name, m.name;

-- name: monitor_update :one
-- Changes what a monitor scores with; the version bumps only when something changed.
UPDATE monitors
SET sample_rate = %(sample_rate)s, cap_per_hour = %(cap_per_hour)s,
    builtins = %(builtins)s, evaluator_ids = %(evaluator_ids)s, rubric = %(rubric)s,
    version = version + CASE WHEN (sample_rate, cap_per_hour, builtins, evaluator_ids, rubric)
                                  IS DISTINCT FROM
                                  (%(sample_rate)s::double precision, %(cap_per_hour)s::integer,
                                   %(builtins)s::text[], %(evaluator_ids)s::bigint[],
                                   %(rubric)s::text)
                             THEN 1 ELSE 0 END,
    updated_at = now()
WHERE id = %(monitor_id)s
RETURNING version;

-- name: monitor_delete :exec
-- Deletes a monitor; its scores go with it.
DELETE FROM monitors WHERE id = %(monitor_id)s;

-- name: monitor_score_insert :exec
-- One score; a second insert for the same monitor version, session and score is a no-op.
INSERT INTO monitor_scores (monitor_id, monitor_version, agent_id, session_id, score_name,
                            value, passed, comment, error, session_settled_at)
VALUES (%(monitor_id)s, %(monitor_version)s, %(agent_id)s, %(session_id)s, %(score_name)s,
        %(value)s, %(passed)s, %(comment)s, %(error)s, %(session_settled_at)s)
ON CONFLICT ON CONSTRAINT monitor_scores_once DO NOTHING;

-- name: monitor_sessions_scored_last_hour :one
-- Sessions a monitor version scored in the last hour, for its cap.
SELECT count(DISTINCT session_id) AS n FROM monitor_scores
WHERE monitor_id = %(monitor_id)s AND monitor_version = %(monitor_version)s
  AND scored_at > now() - interval '1 hour';

-- name: monitor_sessions_worst :many
-- Scored sessions of a monitor since a time, worst first by one score (or by the lowest of
-- their scores when score is NULL), optionally only those below a value.
SELECT s.session_id, a.name AS agent, aw.name AS agent_workspace,
       min(s.session_settled_at) AS settled_at,
       jsonb_object_agg(s.score_name, s.value) AS scores,
       min(s.value) FILTER (WHERE %(score)s::text IS NULL OR s.score_name = %(score)s) AS key
FROM monitor_scores s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
WHERE s.monitor_id = %(monitor_id)s AND s.scored_at >= %(since)s
GROUP BY s.session_id, a.name, aw.name
HAVING %(below)s::double precision IS NULL
    OR min(s.value) FILTER (WHERE %(score)s::text IS NULL OR s.score_name = %(score)s)
       < %(below)s
ORDER BY key ASC NULLS LAST, settled_at DESC
LIMIT %(limit)s;
