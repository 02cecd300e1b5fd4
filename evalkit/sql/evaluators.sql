-- name: evaluator_insert :one
-- Create a remote evaluator; returns nothing when the workspace has one of that name.
INSERT INTO evaluators (workspace_id, name, endpoint, kind, api_key_env, timeout_seconds, created_by)
VALUES (
    %(workspace_id)s, %(name)s, %(endpoint)s, %(kind)s, %(api_key_env)s, %(timeout)s,
    %(actor_id)s
)
ON CONFLICT (workspace_id, name) DO NOTHING
RETURNING id;

-- name: evaluator_set_api_key :exec
-- Store a remote evaluator's key (SecretBox text) or remove it (null).
UPDATE evaluators SET api_key = %(api_key)s WHERE id = %(id)s;

-- name: evaluator_list :many
-- Remote evaluators of one workspace (or all, or one by name), without keys.
SELECT e.id, e.name, w.name AS workspace, e.endpoint, e.kind,
       e.api_key IS NOT NULL AS has_api_key, e.api_key_env, e.timeout_seconds,
       e.created_at, u.username AS created_by
FROM evaluators e
JOIN workspaces w ON w.id = e.workspace_id
LEFT JOIN users u ON u.id = e.created_by
WHERE (%(workspace_id)s::bigint IS NULL OR e.workspace_id = %(workspace_id)s)
  AND (%(name)s::text IS NULL OR e.name = %(name)s)
ORDER BY w.name, e.name;

-- name: evaluator_list_for_scoring :many
-- A workspace's remote evaluators with their keys (SecretBox text), for the scoring job.
SELECT e.id, e.name, w.name AS workspace, e.endpoint, e.kind, e.api_key, e.timeout_seconds
FROM evaluators e JOIN workspaces w ON w.id = e.workspace_id
WHERE e.workspace_id = %(workspace_id)s
ORDER BY e.name;

-- name: evaluator_list_names :many
-- Which of the given names a workspace has a remote evaluator for, with their ids.
SELECT id, name FROM evaluators
WHERE workspace_id = %(workspace_id)s AND name = ANY(%(names)s::text[]);

-- name: evaluator_delete :one
-- Delete a workspace's remote evaluator by name; returns its id when it existed.
DELETE FROM evaluators WHERE workspace_id = %(workspace_id)s AND name = %(name)s
RETURNING id;
