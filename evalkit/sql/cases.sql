-- name: case_list_current_for_sync :many
-- Every case of a dataset with its current version (through cases.current_version): what
-- sync compares against, and what a case sent by hash alone keeps (its overlay target and
-- custom evaluator names).
SELECT c.id AS case_pk, c.case_id, v.id AS version_id, v.version, v.version_hash, v.removed,
       v.overlay_target,
       CASE WHEN jsonb_typeof(v.content #> '{evaluators,custom}') = 'object'
            THEN ARRAY(SELECT jsonb_object_keys(v.content #> '{evaluators,custom}'))
       END AS custom_names
FROM cases c
JOIN case_versions v ON v.case_pk = c.id AND v.version = c.current_version
WHERE c.dataset_id = %(dataset_id)s
ORDER BY c.id;

-- name: case_list_taken :many
-- Of the given case ids, those used by another dataset of the workspace (removed or not).
SELECT c.case_id, d.name AS dataset
FROM cases c JOIN datasets d ON d.id = c.dataset_id
WHERE c.workspace_id = %(workspace_id)s AND c.case_id = ANY(%(case_ids)s::text[])
  AND (%(dataset_id)s::bigint IS NULL OR c.dataset_id <> %(dataset_id)s::bigint);

-- name: case_list_live_targets :many
-- Of the given case ids, those that are live cases (current version not removed) of
-- another dataset of the workspace.
SELECT c.case_id
FROM cases c
JOIN case_versions v ON v.case_pk = c.id AND v.version = c.current_version
WHERE c.workspace_id = %(workspace_id)s AND c.case_id = ANY(%(case_ids)s::text[])
  AND NOT v.removed
  AND (%(dataset_id)s::bigint IS NULL OR c.dataset_id <> %(dataset_id)s::bigint);

-- name: case_insert_many :many
-- Create cases (ids only) in a dataset; returns their keys.
INSERT INTO cases (workspace_id, dataset_id, case_id)
SELECT %(workspace_id)s, %(dataset_id)s, ids.case_id
FROM jsonb_array_elements_text(%(case_ids)s::jsonb) AS ids (case_id)
RETURNING id AS case_pk, case_id;

-- name: case_version_insert_many :many
-- Add case versions, one per element of a JSON array, and advance each case's
-- current_version to its highest version in the same statement; returns their ids.
WITH added AS (
    INSERT INTO case_versions (case_pk, version, content, content_hash, fixtures, version_hash,
                               overlay_target, source, review_state, promoted_from, created_by)
    SELECT r.case_pk, r.version, r.content, r.content_hash, r.fixtures, r.version_hash,
           r.overlay_target, r.source, r.review_state, r.promoted_from, %(actor_id)s
    FROM jsonb_to_recordset(%(rows)s::jsonb) AS r (
        case_pk bigint, version integer, content jsonb, content_hash text, fixtures jsonb,
        version_hash text, overlay_target text, source text, review_state text,
        promoted_from bigint
    )
    RETURNING id AS version_id, case_pk, version
), marked AS (
    UPDATE cases c
    SET current_version = GREATEST(c.current_version, newest.version)
    FROM (SELECT case_pk, max(version) AS version FROM added GROUP BY case_pk) newest
    WHERE c.id = newest.case_pk
)
SELECT version_id, case_pk, version FROM added;

-- name: case_version_set_removed_many :exec
-- Soft-remove (or restore) case versions.
UPDATE case_versions SET removed = %(removed)s WHERE id = ANY(%(version_ids)s::bigint[]);

-- name: case_event_insert_many :exec
-- Append changelog entries, one per element of a JSON array.
INSERT INTO case_events (case_pk, version_id, kind, actor_id, comment, branch, sha, dirty)
SELECT r.case_pk, r.version_id, r.kind, %(actor_id)s, r.comment, %(branch)s, %(sha)s,
       %(dirty)s
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r (
    case_pk bigint, version_id bigint, kind text, comment text
);

-- name: case_event_insert :exec
-- Append one changelog entry (review decision, comment, promotion).
INSERT INTO case_events (case_pk, version_id, kind, actor_id, comment)
VALUES (%(case_pk)s, %(version_id)s, %(kind)s, %(actor_id)s, %(comment)s);

-- name: case_list_in_dataset :many
-- The cases of a dataset with their current version (through cases.current_version), by id.
SELECT c.case_id, v.version, v.review_state, v.removed, v.overlay_target, v.source,
       v.created_at
FROM cases c
JOIN case_versions v ON v.case_pk = c.id AND v.version = c.current_version
WHERE c.dataset_id = %(dataset_id)s
ORDER BY c.case_id;

-- name: case_get :one
-- One case of a workspace by id, with its dataset.
SELECT c.id AS case_pk, c.case_id, c.dataset_id, d.name AS dataset
FROM cases c JOIN datasets d ON d.id = c.dataset_id
WHERE c.workspace_id = %(workspace_id)s AND c.case_id = %(case_id)s;

-- name: case_version_list :many
-- Every version of a case, newest first, with who made it and where it was promoted from.
SELECT v.id AS version_id, v.version, v.content, v.content_hash, v.fixtures, v.version_hash,
       v.overlay_target, v.source, v.review_state, v.removed, v.created_at,
       u.username AS created_by,
       pc.case_id AS promoted_case, pw.name AS promoted_workspace, pv.version AS promoted_version
FROM case_versions v
LEFT JOIN users u ON u.id = v.created_by
LEFT JOIN case_versions pv ON pv.id = v.promoted_from
LEFT JOIN cases pc ON pc.id = pv.case_pk
LEFT JOIN workspaces pw ON pw.id = pc.workspace_id
WHERE v.case_pk = %(case_pk)s
ORDER BY v.version DESC;

-- name: case_event_list :many
-- The changelog of a case, oldest first.
SELECT e.kind, v.version, u.username AS actor, e.comment, e.branch, e.sha, e.dirty,
       e.created_at
FROM case_events e
LEFT JOIN case_versions v ON v.id = e.version_id
LEFT JOIN users u ON u.id = e.actor_id
WHERE e.case_pk = %(case_pk)s
ORDER BY e.id;

-- name: case_version_set_review :exec
-- Record a review decision on one version.
UPDATE case_versions SET review_state = %(review_state)s WHERE id = %(version_id)s;

-- name: case_version_set_approved_restored :exec
-- Mark a version approved and not removed (promotion of an unchanged version).
UPDATE case_versions SET review_state = 'approved', removed = false WHERE id = %(version_id)s;

-- name: case_list_overlays_of :many
-- Live, not rejected overlay cases of the workspace whose current version (through
-- cases.current_version) patches the given case id.
SELECT c.id AS case_pk, c.case_id, d.name AS dataset, v.id AS version_id
FROM case_versions v
JOIN cases c ON c.id = v.case_pk AND c.current_version = v.version
JOIN datasets d ON d.id = c.dataset_id
WHERE v.overlay_target = %(case_id)s AND c.workspace_id = %(workspace_id)s
  AND NOT v.removed AND v.review_state <> 'rejected'
ORDER BY c.case_id;
