-- name: agent_insert :one
-- Create an agent; returns nothing when the workspace already has one of that name.
INSERT INTO agents (
    workspace_id, name, harness_url, api_key_env, trajectory_source, max_concurrent_runs,
    run_timeout_seconds, poll_interval_seconds, stop_grace_seconds, trajectory_wait_seconds,
    provides, created_by
)
VALUES (
    %(workspace_id)s, %(name)s, %(harness_url)s, %(api_key_env)s, %(trajectory_source)s,
    %(max_concurrent_runs)s, %(run_timeout)s, %(poll_interval)s, %(stop_grace)s,
    %(trajectory_wait)s, %(provides)s::jsonb, %(actor_id)s
)
ON CONFLICT (workspace_id, name) DO NOTHING
RETURNING id;

-- name: agent_get_by_name :one
-- One agent of a workspace, without its key; the agent columns are null when it has none
-- of that name (the workspace's name still comes back, for the error message).
SELECT a.id, w.id AS workspace_id, w.name AS workspace, w.kind AS workspace_kind,
       w.owner_id, a.name, a.harness_url, a.api_key_env, a.api_key IS NOT NULL AS has_api_key,
       a.trajectory_source, a.max_concurrent_runs, a.run_timeout_seconds,
       a.poll_interval_seconds, a.stop_grace_seconds, a.trajectory_wait_seconds, a.provides,
       m.version AS mapping_version, a.created_at, u.username AS created_by, a.updated_at
FROM workspaces w
LEFT JOIN agents a ON a.workspace_id = w.id AND a.name = %(name)s
LEFT JOIN span_mappings m ON m.agent_id = a.id AND m.state = 'active'
LEFT JOIN users u ON u.id = a.created_by
WHERE w.id = %(workspace_id)s;

-- name: agent_get_by_id :one
-- One agent by id, without its key.
SELECT a.id, w.id AS workspace_id, w.name AS workspace, w.kind AS workspace_kind,
       w.owner_id, a.name, a.harness_url, a.api_key_env, a.api_key IS NOT NULL AS has_api_key,
       a.trajectory_source, a.max_concurrent_runs, a.run_timeout_seconds,
       a.poll_interval_seconds, a.stop_grace_seconds, a.trajectory_wait_seconds, a.provides,
       m.version AS mapping_version, a.created_at, u.username AS created_by, a.updated_at
FROM agents a
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN span_mappings m ON m.agent_id = a.id AND m.state = 'active'
LEFT JOIN users u ON u.id = a.created_by
WHERE a.id = %(id)s;

-- name: agent_list :many
-- Agents of every workspace, or of one (workspace_id), by workspace then name; no keys.
SELECT a.id, w.id AS workspace_id, w.name AS workspace, w.kind AS workspace_kind,
       w.owner_id, a.name, a.harness_url, a.api_key_env, a.api_key IS NOT NULL AS has_api_key,
       a.trajectory_source, a.max_concurrent_runs, a.run_timeout_seconds,
       a.poll_interval_seconds, a.stop_grace_seconds, a.trajectory_wait_seconds, a.provides,
       m.version AS mapping_version, a.created_at, u.username AS created_by, a.updated_at
FROM agents a
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN span_mappings m ON m.agent_id = a.id AND m.state = 'active'
LEFT JOIN users u ON u.id = a.created_by
WHERE %(workspace_id)s::bigint IS NULL OR a.workspace_id = %(workspace_id)s::bigint
ORDER BY w.name, a.name;

-- name: agent_lock_by_name :one
-- An agent's id, locked until the transaction ends (edits and deletes queue here, and
-- experiments cannot be created for it meanwhile).
SELECT id FROM agents WHERE workspace_id = %(workspace_id)s AND name = %(name)s FOR UPDATE;

-- name: agent_update :exec
-- Write every editable column of an agent (the caller merged the edit into its row).
UPDATE agents
SET harness_url = %(harness_url)s, api_key_env = %(api_key_env)s,
    trajectory_source = %(trajectory_source)s, max_concurrent_runs = %(max_concurrent_runs)s,
    run_timeout_seconds = %(run_timeout)s, poll_interval_seconds = %(poll_interval)s,
    stop_grace_seconds = %(stop_grace)s, trajectory_wait_seconds = %(trajectory_wait)s,
    provides = %(provides)s::jsonb, updated_at = now()
WHERE id = %(id)s;

-- name: agent_set_api_key :exec
-- Store an agent's key (SecretBox text) or remove it (null).
UPDATE agents SET api_key = %(api_key)s, updated_at = now() WHERE id = %(id)s;

-- name: agent_get_api_key :one
-- An agent's stored key as SecretBox text (null when it has none).
SELECT api_key FROM agents WHERE id = %(id)s;

-- name: agent_count_experiments :one
-- How many experiments an agent has, and how many of them are running.
SELECT count(*) AS total, count(*) FILTER (WHERE status = 'running') AS running
FROM experiments WHERE agent_id = %(agent_id)s;

-- name: agent_delete :exec
-- Delete an agent, locked by the caller (agent_lock_by_name: every batch that held the
-- agent has committed, and no other can hold it now); its span mappings, experiments and
-- runs go with it by their foreign keys, its trace sessions and traces here (they have no
-- foreign key: see agent_hold).
WITH traces AS (
    DELETE FROM trace_sessions WHERE agent_id = %(id)s
), sessions AS (
    DELETE FROM sessions WHERE agent_id = %(id)s
)
DELETE FROM agents WHERE id = %(id)s;

-- name: agent_hold :one
-- Hold an agent until the transaction ends, before writing its trace sessions or traces:
-- its delete waits until then, and nothing when it was deleted (the caller writes nothing).
-- trace_claim_many holds it the same way for a batch.
SELECT id FROM agents WHERE id = %(agent_id)s FOR KEY SHARE;

-- name: span_mapping_retire_active :one
-- Retire an agent's active span mapping; returns its version (nothing when none was active).
UPDATE span_mappings SET state = 'retired'
WHERE agent_id = %(agent_id)s AND state = 'active'
RETURNING version;

-- name: span_mapping_insert_active :one
-- Add an agent's next span mapping version as the active one.
INSERT INTO span_mappings (agent_id, version, state, body, created_by)
SELECT %(agent_id)s, coalesce(max(version), 0) + 1, 'active', %(body)s::jsonb, %(actor_id)s
FROM span_mappings WHERE agent_id = %(agent_id)s
RETURNING version;

-- name: span_mapping_get_active :one
-- An agent's active span mapping: its version and body.
SELECT version, body FROM span_mappings WHERE agent_id = %(agent_id)s AND state = 'active';

-- name: span_mapping_insert_draft :one
-- Add an agent's next span mapping version as a draft.
INSERT INTO span_mappings (agent_id, version, state, body, created_by)
SELECT %(agent_id)s, coalesce(max(version), 0) + 1, 'draft', %(body)s::jsonb, %(actor_id)s
FROM span_mappings WHERE agent_id = %(agent_id)s
RETURNING version;

-- name: span_mapping_list :many
-- Every span mapping version of an agent, newest first, with who made it.
SELECT m.version, m.state, m.body, m.created_at, u.username AS created_by
FROM span_mappings m
LEFT JOIN users u ON u.id = m.created_by
WHERE m.agent_id = %(agent_id)s
ORDER BY m.version DESC;

-- name: span_mapping_get :one
-- One span mapping version of an agent: a number, or null for the active one.
SELECT m.version, m.state, m.body, m.created_at, u.username AS created_by
FROM span_mappings m
LEFT JOIN users u ON u.id = m.created_by
WHERE m.agent_id = %(agent_id)s
  AND CASE WHEN %(version)s::integer IS NULL THEN m.state = 'active'
           ELSE m.version = %(version)s::integer END;

-- name: span_mapping_activate :one
-- Make one version of an agent's span mapping the active one (the caller retired the
-- previous one first); returns nothing when the agent has no such version.
UPDATE span_mappings SET state = 'active'
WHERE agent_id = %(agent_id)s AND version = %(version)s
RETURNING version;
