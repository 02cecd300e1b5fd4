-- Accounts: users, their login tokens, workspaces, memberships and promotion links.

CREATE TABLE users (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    username      text NOT NULL,
    password_hash text,
    is_admin      boolean NOT NULL DEFAULT false,
    oidc_subject  text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz,
    CONSTRAINT users_username_key UNIQUE (username),
    CONSTRAINT users_oidc_subject_key UNIQUE (oidc_subject),
    CONSTRAINT users_username_format CHECK (username ~ '^[a-z0-9][a-z0-9_.-]{0,62}$')
);

CREATE TABLE login_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT login_tokens_token_hash_key UNIQUE (token_hash)
);
CREATE INDEX login_tokens_user_id_idx ON login_tokens (user_id);
CREATE INDEX login_tokens_expires_at_idx ON login_tokens (expires_at);

CREATE TABLE workspaces (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL,
    kind       text NOT NULL,
    owner_id   bigint REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workspaces_name_key UNIQUE (name),
    CONSTRAINT workspaces_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT workspaces_kind_check CHECK (kind IN ('personal', 'shared')),
    CONSTRAINT workspaces_personal_has_owner CHECK ((kind = 'personal') = (owner_id IS NOT NULL))
);
CREATE UNIQUE INDEX workspaces_one_personal_per_user ON workspaces (owner_id) WHERE kind = 'personal';

CREATE TABLE memberships (
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, user_id),
    CONSTRAINT memberships_role_check CHECK (role IN ('writer', 'reviewer'))
);

CREATE TABLE promotions (
    source_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    target_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT promotions_source_key UNIQUE (source_id),
    CONSTRAINT promotions_target_key UNIQUE (target_id),
    CONSTRAINT promotions_not_self CHECK (source_id <> target_id)
);
