-- Scores, scoring rounds, LLM providers, the default judge, remote evaluators.

-- A round is one scoring pass over an experiment's runs: round 1 when the runs finish,
-- later rounds from `evalkit evaluate` (old rounds are kept).
CREATE TABLE scoring_rounds (
    experiment_id bigint NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    round         integer NOT NULL,
    evaluators    text[],
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    bigint REFERENCES users (id) ON DELETE SET NULL,
    PRIMARY KEY (experiment_id, round),
    CONSTRAINT scoring_rounds_round_check CHECK (round >= 1)
);

ALTER TABLE experiments ADD COLUMN scoring_round integer NOT NULL DEFAULT 1;

-- One row per score name per run per round; a replayed scoring job inserts nothing twice.
CREATE TABLE scores (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    round             integer NOT NULL DEFAULT 1,
    name              text NOT NULL,
    value             double precision,
    kind              text NOT NULL DEFAULT 'evaluator',
    explanation       text,
    error             text,
    skipped           text,
    evaluator         text NOT NULL,
    evaluator_version text,
    judge_model       text,
    prompt_hash       text,
    raw               jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT scores_run_round_name_key UNIQUE (run_id, round, name),
    CONSTRAINT scores_kind_check CHECK (kind IN ('evaluator', 'gauge')),
    CONSTRAINT scores_value_check CHECK (value IS NULL OR (value >= 0 AND value <= 1))
);

-- OpenAI-compatible chat completion endpoints for the judge (admin only). api_key is
-- SecretBox ciphertext, never returned.
CREATE TABLE llm_providers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    base_url    text NOT NULL,
    api_key     text,
    api_key_env text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT llm_providers_name_key UNIQUE (name),
    CONSTRAINT llm_providers_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$')
);

-- Server-wide settings set by admins, one row per key (the default judge, ...).
CREATE TABLE server_settings (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by bigint REFERENCES users (id) ON DELETE SET NULL
);

-- Remote evaluators (Custom Evaluator API) of a workspace; api_key is SecretBox text.
CREATE TABLE evaluators (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name         text NOT NULL,
    endpoint     text NOT NULL,
    kind         text NOT NULL DEFAULT 'score',
    api_key      text,
    api_key_env  text,
    timeout_seconds double precision NOT NULL DEFAULT 30,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT evaluators_workspace_name_key UNIQUE (workspace_id, name),
    CONSTRAINT evaluators_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'),
    CONSTRAINT evaluators_kind_check CHECK (kind IN ('score', 'gauge')),
    CONSTRAINT evaluators_timeout_check CHECK (timeout_seconds > 0)
);
