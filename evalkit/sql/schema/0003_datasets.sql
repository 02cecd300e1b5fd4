-- Datasets, cases, immutable case versions, the case changelog, and content-addressed fixtures.

CREATE TABLE fixtures (
    sha256     text PRIMARY KEY,
    size       bigint NOT NULL,
    blob_key   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT fixtures_sha256_format CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    CONSTRAINT fixtures_size_check CHECK (size >= 0)
);

CREATE TABLE datasets (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id       bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name               text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    created_by         bigint REFERENCES users (id) ON DELETE SET NULL,
    last_sync_at       timestamptz,
    last_sync_branch   text,
    last_sync_sha      text,
    last_sync_actor_id bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT datasets_workspace_name_key UNIQUE (workspace_id, name),
    CONSTRAINT datasets_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$')
);

-- A case is its stable id; what it says lives in its versions.
CREATE TABLE cases (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    dataset_id   bigint NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    case_id      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cases_workspace_case_id_key UNIQUE (workspace_id, case_id)
);
CREATE INDEX cases_dataset_id_idx ON cases (dataset_id);

-- Content, its hash and the fixture pins never change; review_state and removed do.
-- The current version of a case is its highest version number.
CREATE TABLE case_versions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    case_pk        bigint NOT NULL REFERENCES cases (id) ON DELETE CASCADE,
    version        integer NOT NULL,
    content        jsonb NOT NULL,
    content_hash   text NOT NULL,
    fixtures       jsonb NOT NULL DEFAULT '{}',
    version_hash   text NOT NULL,
    overlay_target text,
    source         text,
    review_state   text NOT NULL DEFAULT 'pending',
    removed        boolean NOT NULL DEFAULT false,
    promoted_from  bigint REFERENCES case_versions (id) ON DELETE SET NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT case_versions_case_version_key UNIQUE (case_pk, version),
    CONSTRAINT case_versions_version_check CHECK (version >= 1),
    CONSTRAINT case_versions_review_state_check
        CHECK (review_state IN ('pending', 'approved', 'rejected'))
);
CREATE INDEX case_versions_overlay_target_idx ON case_versions (overlay_target)
    WHERE overlay_target IS NOT NULL;

CREATE TABLE case_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    case_pk    bigint NOT NULL REFERENCES cases (id) ON DELETE CASCADE,
    version_id bigint REFERENCES case_versions (id) ON DELETE SET NULL,
    kind       text NOT NULL,
    actor_id   bigint REFERENCES users (id) ON DELETE SET NULL,
    comment    text,
    branch     text,
    sha        text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT case_events_kind_check CHECK (
        kind IN ('add', 'change', 'remove', 'restore', 'approve', 'reject', 'comment', 'promotion')
    )
);
CREATE INDEX case_events_case_pk_idx ON case_events (case_pk, id);
