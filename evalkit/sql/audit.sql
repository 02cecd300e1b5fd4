-- name: audit_insert :exec
-- Record one admin action; runs in the action's own transaction.
INSERT INTO audit_log (actor_id, actor, action, target, detail)
VALUES (%(actor_id)s, %(actor)s, %(action)s, %(target)s, %(detail)s::jsonb);

-- name: audit_list :many
-- The latest actions first, optionally only one action kind.
SELECT id, at, actor, action, target, detail
FROM audit_log
WHERE %(action)s::text IS NULL OR action = %(action)s::text
ORDER BY at DESC, id DESC
LIMIT %(limit)s;
