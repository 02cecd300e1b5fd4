-- name: user_insert :one
-- Create a user; the personal workspace is created by workspace_insert_personal.
INSERT INTO users (username, password_hash, is_admin, oidc_subject)
VALUES (%(username)s, %(password_hash)s, %(is_admin)s, %(oidc_subject)s)
RETURNING id, username, is_admin, created_at, disabled_at;

-- name: user_get_by_name :one
-- One user by username, with the password hash for login checks.
SELECT id, username, password_hash, is_admin, created_at, disabled_at
FROM users WHERE username = %(username)s;

-- name: user_list :many
-- Every user, in name order.
SELECT id, username, is_admin, created_at, disabled_at FROM users ORDER BY username;

-- name: user_admin_exists :one
-- Whether at least one enabled admin exists (first-start bootstrap).
SELECT EXISTS (SELECT 1 FROM users WHERE is_admin AND disabled_at IS NULL) AS exists;

-- name: user_disable :one
-- Disable a user; idempotent. Their login tokens are revoked by login_token_revoke_all.
UPDATE users SET disabled_at = coalesce(disabled_at, now())
WHERE username = %(username)s
RETURNING id, username, is_admin, created_at, disabled_at;

-- name: user_enable :one
-- Enable a disabled user again; idempotent. Tokens revoked when they were disabled stay
-- revoked: the user logs in again.
UPDATE users SET disabled_at = NULL
WHERE username = %(username)s
RETURNING id, username, is_admin, created_at, disabled_at;
