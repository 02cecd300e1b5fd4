-- Agents, their span mappings, experiments, runs and trajectories.

-- An agent with no harness_url is code-driven: the SDK reports its runs.
-- api_key is SecretBox ciphertext (AES-GCM with the server's encryption_key), never returned.
-- api_key_env names the variable the key came from: the CLI reads it to drive a personal agent.
CREATE TABLE agents (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id            bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name                    text NOT NULL,
    harness_url             text,
    api_key                 text,
    api_key_env             text,
    trajectory_source       text NOT NULL DEFAULT 'harness',
    max_concurrent_runs     integer NOT NULL DEFAULT 4,
    run_timeout_seconds     double precision NOT NULL DEFAULT 600,
    poll_interval_seconds   double precision NOT NULL DEFAULT 2,
    stop_grace_seconds      double precision NOT NULL DEFAULT 30,
    trajectory_wait_seconds double precision NOT NULL DEFAULT 60,
    provides                jsonb NOT NULL DEFAULT '{}',
    created_at              timestamptz NOT NULL DEFAULT now(),
    created_by              bigint REFERENCES users (id) ON DELETE SET NULL,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agents_workspace_name_key UNIQUE (workspace_id, name),
    CONSTRAINT agents_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT agents_trajectory_source_check CHECK (trajectory_source IN ('harness', 'otel')),
    CONSTRAINT agents_max_concurrent_runs_check CHECK (max_concurrent_runs BETWEEN 1 AND 1000),
    CONSTRAINT agents_run_timeout_check CHECK (run_timeout_seconds > 0),
    CONSTRAINT agents_poll_interval_check CHECK (poll_interval_seconds > 0),
    CONSTRAINT agents_stop_grace_check CHECK (stop_grace_seconds >= 0),
    CONSTRAINT agents_trajectory_wait_check CHECK (trajectory_wait_seconds >= 0)
);

-- Where a traced agent's spans keep the session id, answer, messages and tool calls.
-- At most one active version per agent.
CREATE TABLE span_mappings (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id   bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    version    integer NOT NULL,
    state      text NOT NULL DEFAULT 'draft',
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT span_mappings_agent_version_key UNIQUE (agent_id, version),
    CONSTRAINT span_mappings_state_check CHECK (state IN ('draft', 'active', 'retired'))
);
CREATE UNIQUE INDEX span_mappings_one_active_idx ON span_mappings (agent_id)
    WHERE state = 'active';

-- driver: who moves the runs: 'server' (jobs), 'cli' (a personal harness agent, driven
-- from its owner's machine) or 'sdk' (a code-driven agent; the SDK reports each run).
CREATE TABLE experiments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    dataset_id   bigint NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    agent_id     bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    driver       text NOT NULL,
    status       text NOT NULL DEFAULT 'running',
    repetitions  integer NOT NULL DEFAULT 1,
    model        text,
    split        text,
    case_ids     text[],
    capabilities jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    finished_at  timestamptz,
    summary      jsonb,
    CONSTRAINT experiments_driver_check CHECK (driver IN ('server', 'cli', 'sdk')),
    CONSTRAINT experiments_status_check CHECK (status IN ('running', 'finished')),
    CONSTRAINT experiments_repetitions_check CHECK (repetitions BETWEEN 1 AND 100)
);
CREATE INDEX experiments_workspace_idx ON experiments (workspace_id, id DESC);

-- One run per pinned case version and repetition (an overlay also pins its target's
-- version in target_version_id). State moves only forward, by
-- compare-and-set on the state column (see evalkit/runs/machine.py).
CREATE TABLE runs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    experiment_id     bigint NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    agent_id          bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    case_version_id   bigint NOT NULL REFERENCES case_versions (id),
    target_version_id bigint REFERENCES case_versions (id),
    case_id           text NOT NULL,
    repetition        integer NOT NULL DEFAULT 1,
    state             text NOT NULL DEFAULT 'queued',
    harness_run_id    text,
    harness_status    text,
    session_id        text,
    answer            text,
    output            jsonb,
    error             text,
    timed_out         boolean NOT NULL DEFAULT false,
    attempts          integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    deadline_at       timestamptz,
    stop_requested_at timestamptz,
    harness_done_at   timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runs_experiment_case_repetition_key
        UNIQUE (experiment_id, case_version_id, repetition),
    CONSTRAINT runs_state_check CHECK (state IN (
        'queued', 'starting', 'running', 'stopping', 'collecting', 'scoring',
        'done', 'failed', 'errored'
    )),
    CONSTRAINT runs_repetition_check CHECK (repetition >= 1)
);
CREATE INDEX runs_experiment_idx ON runs (experiment_id, id);
-- Finding live runs (experiment finish, resume) and counting an agent's runs in flight.
CREATE INDEX runs_live_idx ON runs (experiment_id) WHERE state NOT IN ('done', 'failed', 'errored');
CREATE INDEX runs_agent_in_flight_idx ON runs (agent_id)
    WHERE state IN ('starting', 'running', 'stopping');
CREATE INDEX runs_agent_queued_idx ON runs (agent_id, id) WHERE state = 'queued';
-- The settle job finds the run a traced session belongs to.
CREATE INDEX runs_agent_session_idx ON runs (agent_id, session_id) WHERE session_id IS NOT NULL;

-- What the harness (or the span mapping) gave as the run's trajectory, stored even when
-- invalid: errors lists the broken ATIF rules, partial says the run was cut short.
CREATE TABLE trajectories (
    run_id     bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    source     text NOT NULL,
    body       jsonb,
    raw        text,
    partial    boolean NOT NULL DEFAULT false,
    valid      boolean NOT NULL,
    errors     jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trajectories_source_check CHECK (source IN ('harness', 'otel', 'sdk'))
);
