-- Agent tokens: bearer tokens that send spans for one agent (stored as a digest).

-- name: agent_token_insert :one
-- Store the digest of a new agent token.
INSERT INTO agent_tokens (agent_id, token_hash, hint, note, created_by)
VALUES (%(agent_id)s, %(token_hash)s, %(hint)s, %(note)s, %(actor_id)s)
RETURNING id, created_at;

-- name: agent_token_resolve :one
-- The agent behind a token digest, with the token's state; records the use (at most once a
-- minute per token, to keep this cheap).
WITH token AS (
    SELECT t.id, t.revoked_at, t.last_used_at, a.id AS agent_id, a.name AS agent,
           w.name AS workspace
    FROM agent_tokens t
    JOIN agents a ON a.id = t.agent_id
    JOIN workspaces w ON w.id = a.workspace_id
    WHERE t.token_hash = %(token_hash)s
), touched AS (
    UPDATE agent_tokens SET last_used_at = now()
    WHERE id = (SELECT id FROM token WHERE revoked_at IS NULL)
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT id AS token_id, revoked_at, agent_id, agent, workspace FROM token;

-- name: agent_token_get :one
-- One token (never its digest) with its agent and workspace.
SELECT t.id, t.hint, t.note, t.created_at, t.last_used_at, t.revoked_at,
       a.id AS agent_id, a.name AS agent, a.workspace_id, w.name AS workspace,
       u.username AS created_by
FROM agent_tokens t
JOIN agents a ON a.id = t.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN users u ON u.id = t.created_by
WHERE t.id = %(id)s;

-- name: agent_token_list :many
-- Tokens, newest first; of one agent when agent_id is given.
SELECT t.id, t.hint, t.note, t.created_at, t.last_used_at, t.revoked_at,
       a.id AS agent_id, a.name AS agent, a.workspace_id, w.name AS workspace,
       u.username AS created_by
FROM agent_tokens t
JOIN agents a ON a.id = t.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN users u ON u.id = t.created_by
WHERE (%(agent_id)s::bigint IS NULL OR t.agent_id = %(agent_id)s)
ORDER BY t.id DESC;

-- name: agent_token_revoke :one
-- Revoke a token (idempotent); its revocation time.
UPDATE agent_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s
RETURNING revoked_at;
