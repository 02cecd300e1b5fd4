-- name: llm_provider_insert :one
-- Create an LLM provider; returns nothing when one of that name exists already.
INSERT INTO llm_providers (name, base_url, api_key_env, created_by)
VALUES (%(name)s, %(base_url)s, %(api_key_env)s, %(actor_id)s)
ON CONFLICT (name) DO NOTHING
RETURNING id;

-- name: llm_provider_set_api_key :exec
-- Store a provider's key (SecretBox text) or remove it (null).
UPDATE llm_providers SET api_key = %(api_key)s WHERE id = %(id)s;

-- name: llm_provider_list :many
-- Every LLM provider (or the one named), without keys, with whether it is the default judge.
SELECT p.id, p.name, p.base_url, p.api_key IS NOT NULL AS has_api_key, p.api_key_env,
       p.created_at, u.username AS created_by,
       coalesce((s.value ->> 'provider_id')::bigint = p.id, false) AS is_default_judge
FROM llm_providers p
LEFT JOIN users u ON u.id = p.created_by
LEFT JOIN server_settings s ON s.key = 'judge_default'
WHERE %(name)s::text IS NULL OR p.name = %(name)s
ORDER BY p.name;

-- name: llm_provider_lock_by_name :one
-- Lock one provider by name for a delete or a default-judge change.
SELECT id, name FROM llm_providers WHERE name = %(name)s FOR UPDATE;

-- name: llm_provider_delete :exec
-- Delete a provider.
DELETE FROM llm_providers WHERE id = %(id)s;

-- name: server_setting_put :exec
-- Set a server setting (insert or replace).
INSERT INTO server_settings (key, value, updated_by)
VALUES (%(key)s, %(value)s::jsonb, %(actor_id)s)
ON CONFLICT (key) DO UPDATE
SET value = excluded.value, updated_at = now(), updated_by = excluded.updated_by;

-- name: server_setting_delete :one
-- Remove a server setting; returns its key when it was set.
DELETE FROM server_settings WHERE key = %(key)s RETURNING key;

-- name: llm_provider_get_default_judge :one
-- The default judge: its provider (key included, as SecretBox text) and model.
SELECT p.id AS provider_id, p.name AS provider, p.base_url, p.api_key,
       s.value ->> 'model' AS model, s.updated_at, u.username AS updated_by
FROM server_settings s
JOIN llm_providers p ON p.id = (s.value ->> 'provider_id')::bigint
LEFT JOIN users u ON u.id = s.updated_by
WHERE s.key = 'judge_default';
