-- name: login_failure_blocked :many
-- The keys among these that may not try again yet, with the seconds left (rounded up).
SELECT key, ceil(extract(epoch FROM blocked_until - now()))::int AS retry_after
FROM login_failures
WHERE key = ANY(%(keys)s) AND blocked_until > now();

-- name: login_failure_record :one
-- Count one failure for a key; a key quiet for forget_seconds starts again at one.
INSERT INTO login_failures (key, failures, last_failed_at)
VALUES (%(key)s, 1, now())
ON CONFLICT (key) DO UPDATE SET
    failures = CASE
        WHEN login_failures.last_failed_at < now() - make_interval(secs => %(forget_seconds)s)
        THEN 1 ELSE login_failures.failures + 1 END,
    last_failed_at = now()
RETURNING failures;

-- name: login_failure_block :exec
-- Refuse the key's next attempts for this many seconds.
UPDATE login_failures SET blocked_until = now() + make_interval(secs => %(seconds)s)
WHERE key = %(key)s;

-- name: login_failure_clear :exec
-- Forget a key's failures (a user's successful login).
DELETE FROM login_failures WHERE key = %(key)s;

-- name: login_failure_delete_stale :exec
-- Forget keys quiet for longer than forget_seconds.
DELETE FROM login_failures
WHERE last_failed_at < now() - make_interval(secs => %(forget_seconds)s)
  AND (blocked_until IS NULL OR blocked_until < now());
