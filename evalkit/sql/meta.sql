-- name: schema_revision_get :one
-- The Alembic revision the database is at (readiness check).
SELECT version_num FROM alembic_version;
