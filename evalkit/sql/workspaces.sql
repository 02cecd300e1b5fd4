-- name: workspace_insert :one
-- Create a workspace (personal with an owner, or shared without).
INSERT INTO workspaces (name, kind, owner_id) VALUES (%(name)s, %(kind)s, %(owner_id)s)
RETURNING id;

-- name: workspace_get_facts :one
-- One workspace by name, with the caller's role and promotion links.
SELECT w.id, w.name, w.kind, w.owner_id, o.username AS owner, w.created_at,
       m.role AS actor_role,
       tgt.name AS promotes_to, src.name AS promoted_from
FROM workspaces w
LEFT JOIN users o ON o.id = w.owner_id
LEFT JOIN memberships m ON m.workspace_id = w.id AND m.user_id = %(actor_id)s
LEFT JOIN promotions p_out ON p_out.source_id = w.id
LEFT JOIN workspaces tgt ON tgt.id = p_out.target_id
LEFT JOIN promotions p_in ON p_in.target_id = w.id
LEFT JOIN workspaces src ON src.id = p_in.source_id
WHERE w.name = %(name)s;

-- name: workspace_list :many
-- Every workspace with the caller's role and promotion links, shared first then by name.
SELECT w.id, w.name, w.kind, w.owner_id, o.username AS owner, w.created_at,
       m.role AS actor_role,
       tgt.name AS promotes_to, src.name AS promoted_from
FROM workspaces w
LEFT JOIN users o ON o.id = w.owner_id
LEFT JOIN memberships m ON m.workspace_id = w.id AND m.user_id = %(actor_id)s
LEFT JOIN promotions p_out ON p_out.source_id = w.id
LEFT JOIN workspaces tgt ON tgt.id = p_out.target_id
LEFT JOIN promotions p_in ON p_in.target_id = w.id
LEFT JOIN workspaces src ON src.id = p_in.source_id
ORDER BY w.kind DESC, w.name;

-- name: membership_upsert :one
-- Add a member or change their role; returns the previous role (null when new).
WITH previous AS (
    SELECT role FROM memberships WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s
)
INSERT INTO memberships (workspace_id, user_id, role)
VALUES (%(workspace_id)s, %(user_id)s, %(role)s)
ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = excluded.role
RETURNING (SELECT role FROM previous) AS previous_role;

-- name: membership_list :many
-- Members of one workspace, by name.
SELECT u.username, m.role, m.created_at, u.disabled_at
FROM memberships m JOIN users u ON u.id = m.user_id
WHERE m.workspace_id = %(workspace_id)s ORDER BY u.username;

-- name: membership_delete :exec
-- Remove a member.
DELETE FROM memberships WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s;

-- name: membership_list_for_user :many
-- The shared workspaces a user is a member of.
SELECT w.name AS workspace, m.role
FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
WHERE m.user_id = %(user_id)s ORDER BY w.name;

-- name: promotion_insert :exec
-- Link a source workspace to its promotion target.
INSERT INTO promotions (source_id, target_id) VALUES (%(source_id)s, %(target_id)s);

-- name: promotion_delete :exec
-- Remove a source workspace's promotion link. Versions already promoted stay in the target.
DELETE FROM promotions WHERE source_id = %(source_id)s;
