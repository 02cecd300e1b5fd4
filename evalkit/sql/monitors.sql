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
       m.scanned_until, m.capped_sessions, m.created_at, m.updated_at,
       ARRAY(SELECT e.name FROM evaluators e WHERE e.id = ANY (m.evaluator_ids)
             ORDER BY e.name) AS evaluators
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
                            kind, evaluator, prompt_hash, value, raw, passed, comment, error,
                            skipped, session_settled_at)
VALUES (%(monitor_id)s, %(monitor_version)s, %(agent_id)s, %(session_id)s, %(score_name)s,
        %(kind)s, %(evaluator)s, %(prompt_hash)s, %(value)s, %(raw)s, %(passed)s, %(comment)s,
        %(error)s, %(skipped)s, %(session_settled_at)s)
ON CONFLICT ON CONSTRAINT monitor_scores_once DO NOTHING;

-- name: monitor_get :one
-- One monitor, by id or by its workspace and name, with its agent and remote evaluators'
-- names.
SELECT m.id, m.name, w.name AS workspace, m.workspace_id, a.name AS agent, m.agent_id,
       m.version, m.sample_rate, m.cap_per_hour, m.builtins, m.evaluator_ids, m.rubric,
       m.scanned_until, m.capped_sessions, m.created_at, m.updated_at,
       ARRAY(SELECT e.name FROM evaluators e WHERE e.id = ANY (m.evaluator_ids)
             ORDER BY e.name) AS evaluators
FROM monitors m
JOIN workspaces w ON w.id = m.workspace_id
JOIN agents a ON a.id = m.agent_id
WHERE m.id = coalesce(%(monitor_id)s::bigint,
                      (SELECT x.id FROM monitors x
                       WHERE x.workspace_id = %(workspace_id)s AND x.name = %(name)s));

-- name: monitor_ids :many
-- Every monitor, for the sweep.
SELECT id FROM monitors ORDER BY id;

-- name: monitor_lock :one
-- Locks one monitor's row for a sweep or a backfill of it (FOR UPDATE: two workers never
-- take sessions of the same monitor at once, so the cap holds).
SELECT id, agent_id, version, sample_rate, cap_per_hour, scanned_until
FROM monitors WHERE id = %(monitor_id)s FOR UPDATE;

-- name: monitor_candidates :many
-- Settled sessions of the monitor's agent last received after since and up to until, that
-- no run claims and that this monitor version has not taken, oldest first.
SELECT s.session_id, s.last_received_at
FROM sessions s
WHERE s.agent_id = %(agent_id)s
  AND s.last_received_at > %(since)s AND s.last_received_at <= %(until)s
  AND s.run_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM runs r
                  WHERE r.agent_id = s.agent_id AND r.session_id = s.session_id)
  AND NOT EXISTS (SELECT 1 FROM monitor_sessions t
                  WHERE t.monitor_id = %(monitor_id)s AND t.monitor_version = %(version)s
                    AND t.session_id = s.session_id)
ORDER BY s.last_received_at, s.session_id
LIMIT %(limit)s;

-- name: monitor_taken_last_hour :one
-- Sessions a monitor version took in the last hour, for its cap (a backfill's not counted).
SELECT count(*) AS n FROM monitor_sessions
WHERE monitor_id = %(monitor_id)s AND monitor_version = %(version)s AND NOT backfill
  AND taken_at > now() - interval '1 hour';

-- name: monitor_take :many
-- Takes sessions for a monitor version; those taken already come back as nothing.
INSERT INTO monitor_sessions (monitor_id, monitor_version, agent_id, session_id, backfill)
SELECT %(monitor_id)s, %(version)s, %(agent_id)s, unnest(%(session_ids)s::text[]), %(backfill)s
ON CONFLICT DO NOTHING
RETURNING session_id;

-- name: monitor_advance :exec
-- Moves the sweep's watermark and counts the sessions it passed over for the cap.
UPDATE monitors
SET scanned_until = greatest(scanned_until, %(until)s),
    capped_sessions = capped_sessions + %(capped)s
WHERE id = %(monitor_id)s;

-- name: monitor_session_for_scoring :one
-- What scoring a taken session needs: whether it is still taken by the monitor's current
-- version, when it settled, and the score names stored for it already.
SELECT t.monitor_version, t.scored_at, s.last_received_at,
       ARRAY(SELECT x.evaluator FROM monitor_scores x
             WHERE x.monitor_id = t.monitor_id AND x.monitor_version = t.monitor_version
               AND x.session_id = t.session_id) AS stored
FROM monitor_sessions t
JOIN sessions s ON s.agent_id = t.agent_id AND s.session_id = t.session_id
WHERE t.monitor_id = %(monitor_id)s AND t.monitor_version = %(version)s
  AND t.session_id = %(session_id)s;

-- name: monitor_session_scored :exec
-- Marks a taken session scored.
UPDATE monitor_sessions SET scored_at = now()
WHERE monitor_id = %(monitor_id)s AND monitor_version = %(version)s
  AND session_id = %(session_id)s AND scored_at IS NULL;

-- name: monitor_score_days :many
-- Per score and UTC day since a time, over every version: readings, mean, passes, mean
-- measurement, errors and skips.
SELECT score_name, kind, date_trunc('day', scored_at AT TIME ZONE 'UTC')::date AS day,
       count(value) AS n, avg(value) AS mean,
       count(*) FILTER (WHERE value >= 0.5) AS passed,
       count(raw) AS raw_n, avg(raw) AS raw_mean,
       count(error) AS errors, count(skipped) AS skipped
FROM monitor_scores
WHERE monitor_id = %(monitor_id)s AND scored_at >= %(since)s
GROUP BY score_name, kind, day
ORDER BY score_name, day;

-- name: monitor_progress :one
-- Sessions a monitor took since a time and how many of them are scored.
SELECT count(*) AS taken, count(scored_at) AS scored
FROM monitor_sessions
WHERE monitor_id = %(monitor_id)s AND taken_at >= %(since)s;

-- name: monitor_sessions_worst :many
-- Scored sessions of a monitor since a time, worst first by one score (or by the lowest of
-- their scores when score is NULL), optionally only those below a value.
SELECT s.session_id, a.name AS agent, aw.name AS agent_workspace,
       min(s.session_settled_at) AS settled_at,
       jsonb_object_agg(s.score_name, coalesce(s.value, s.raw)) AS scores,
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
