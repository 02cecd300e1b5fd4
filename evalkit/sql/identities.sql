-- name: user_get_by_subject :one
-- The user bound to an identity-provider subject.
SELECT id, username, password_hash, is_admin, created_at, disabled_at, oidc_subject
FROM users WHERE oidc_subject = %(subject)s;

-- name: user_set_password :one
-- Replace a user's password hash.
UPDATE users SET password_hash = %(password_hash)s
WHERE username = %(username)s
RETURNING id, username, is_admin, created_at, disabled_at;

-- name: user_set_subject :one
-- Bind a user to an identity-provider subject (single sign-on, machine clients).
UPDATE users SET oidc_subject = %(subject)s
WHERE username = %(username)s
RETURNING id, username, is_admin, created_at, disabled_at;

-- name: login_token_revoke_others :exec
-- Revoke every token of a user but one (NULL: all of them), after a password change.
UPDATE login_tokens SET revoked_at = now()
WHERE user_id = %(user_id)s AND revoked_at IS NULL
  AND (%(token_id)s::bigint IS NULL OR id <> %(token_id)s::bigint);
