-- name: login_token_insert :one
-- Store the digest of a new login token.
INSERT INTO login_tokens (user_id, token_hash, expires_at)
VALUES (%(user_id)s, %(token_hash)s, now() + make_interval(hours => %(ttl_hours)s))
RETURNING id, expires_at;

-- name: login_token_resolve :one
-- The user behind a token digest, with the token's state; the caller checks expiry.
SELECT u.id AS user_id, u.username, u.is_admin, u.disabled_at,
       t.id AS token_id, t.expires_at, t.revoked_at, t.expires_at <= now() AS expired
FROM login_tokens t JOIN users u ON u.id = t.user_id
WHERE t.token_hash = %(token_hash)s;

-- name: login_token_touch :exec
-- Record use, at most once a minute per token to keep reads cheap.
UPDATE login_tokens SET last_used_at = now()
WHERE id = %(token_id)s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: login_token_revoke :exec
-- Revoke one token (logout).
UPDATE login_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = %(token_id)s;

-- name: login_token_revoke_all :exec
-- Revoke every token of a user (disable, password reset).
UPDATE login_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE user_id = %(user_id)s;

-- name: login_token_delete_stale :exec
-- Forget tokens that expired or were revoked more than a day ago.
DELETE FROM login_tokens
WHERE expires_at < now() - interval '1 day' OR revoked_at < now() - interval '1 day';
