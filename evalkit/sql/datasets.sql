-- name: dataset_insert :one
-- Create a dataset; returns nothing when the workspace already has one of that name.
INSERT INTO datasets (workspace_id, name, created_by)
VALUES (%(workspace_id)s, %(name)s, %(actor_id)s)
ON CONFLICT (workspace_id, name) DO NOTHING
RETURNING id;

-- name: dataset_lock :one
-- One dataset of a workspace, locked until the transaction ends (syncs queue here).
SELECT id, name FROM datasets
WHERE workspace_id = %(workspace_id)s AND name = %(name)s
FOR UPDATE;

-- name: dataset_get_id :one
-- The id of one dataset of a workspace.
SELECT id FROM datasets WHERE workspace_id = %(workspace_id)s AND name = %(name)s;

-- name: dataset_set_last_sync :exec
-- Record who synced a dataset, when, and from which branch and commit (dirty: with
-- uncommitted changes).
UPDATE datasets
SET last_sync_at = now(), last_sync_branch = %(branch)s, last_sync_sha = %(sha)s,
    last_sync_dirty = %(dirty)s, last_sync_actor_id = %(actor_id)s
WHERE id = %(id)s;

-- name: dataset_list :many
-- Datasets with live-case counts by review state (of each case's current version); all
-- workspaces or one (workspace_id), all datasets or one (name).
SELECT d.id, d.name, w.name AS workspace, d.created_at,
       d.last_sync_at, d.last_sync_branch, d.last_sync_sha, d.last_sync_dirty,
       u.username AS last_sync_actor,
       count(*) FILTER (WHERE NOT cur.removed) AS cases,
       count(*) FILTER (WHERE NOT cur.removed AND cur.review_state = 'pending') AS pending,
       count(*) FILTER (WHERE NOT cur.removed AND cur.review_state = 'approved') AS approved,
       count(*) FILTER (WHERE NOT cur.removed AND cur.review_state = 'rejected') AS rejected,
       count(*) FILTER (WHERE cur.removed) AS removed
FROM datasets d
JOIN workspaces w ON w.id = d.workspace_id
LEFT JOIN users u ON u.id = d.last_sync_actor_id
LEFT JOIN cases c ON c.dataset_id = d.id
LEFT JOIN case_versions cur ON cur.case_pk = c.id AND cur.version = c.current_version
WHERE (%(workspace_id)s::bigint IS NULL OR d.workspace_id = %(workspace_id)s::bigint)
  AND (%(name)s::text IS NULL OR d.name = %(name)s::text)
GROUP BY d.id, w.name, u.username
ORDER BY w.name, d.name;

-- name: fixture_list_known :many
-- Which of the given sha256 values the server holds bytes for.
SELECT sha256 FROM fixtures WHERE sha256 = ANY(%(sha256s)s::text[]);

-- name: fixture_insert :one
-- Record stored fixture bytes; returns nothing when they were known already.
INSERT INTO fixtures (sha256, size, blob_key, created_by)
VALUES (%(sha256)s, %(size)s, %(blob_key)s, %(actor_id)s)
ON CONFLICT (sha256) DO NOTHING
RETURNING sha256;
