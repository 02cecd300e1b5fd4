-- A monitor scores the settled sessions of one agent that no run claims. Its version bumps
-- on every change of what it scores with (sample rate, cap, evaluators, rubric), so a
-- changed monitor scores sessions again under its new version. Names are unique per
-- workspace (the agent's workspace).
CREATE TABLE monitors (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name text NOT NULL,
    agent_id bigint NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    version integer NOT NULL DEFAULT 1,
    sample_rate double precision NOT NULL,
    cap_per_hour integer,
    -- Built-in gauges by their evaluator names (latency, steps, tokens, cost,
    -- tool_call_count).
    builtins text[] NOT NULL DEFAULT '{}',
    -- Remote evaluators of the workspace, by id.
    evaluator_ids bigint[] NOT NULL DEFAULT '{}',
    -- The judge rubric; NULL when the monitor has no judge.
    rubric text,
    created_by bigint REFERENCES users(id) ON DELETE SET NULL,
    -- The sweep's watermark: sessions last received up to here have been considered (taken
    -- or sampled out); a new monitor starts at its creation.
    scanned_until timestamptz NOT NULL DEFAULT now(),
    -- Sessions the sweep passed over because the hour's cap was reached.
    capped_sessions bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT monitors_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT monitors_sample_rate_range CHECK (sample_rate >= 0 AND sample_rate <= 1),
    CONSTRAINT monitors_cap_positive CHECK (cap_per_hour IS NULL OR cap_per_hour > 0),
    CONSTRAINT monitors_version_positive CHECK (version > 0),
    CONSTRAINT monitors_workspace_name_key UNIQUE (workspace_id, name)
);
CREATE INDEX monitors_agent_idx ON monitors (agent_id);

-- A session one monitor version took for scoring: the row is inserted with its scoring
-- job in one transaction, so the cap counts sessions taken (scored or about to be) and a
-- session is taken at most once per version. scored_at is set when its job has stored
-- every score.
CREATE TABLE monitor_sessions (
    monitor_id bigint NOT NULL REFERENCES monitors(id) ON DELETE CASCADE,
    monitor_version integer NOT NULL,
    agent_id bigint NOT NULL,
    session_id text NOT NULL,
    backfill boolean NOT NULL DEFAULT false,
    taken_at timestamptz NOT NULL DEFAULT now(),
    scored_at timestamptz,
    PRIMARY KEY (monitor_id, monitor_version, session_id),
    CONSTRAINT monitor_sessions_session_fkey FOREIGN KEY (agent_id, session_id)
        REFERENCES sessions(agent_id, session_id) ON DELETE CASCADE
);
CREATE INDEX monitor_sessions_taken_idx ON monitor_sessions (monitor_id, taken_at DESC);

-- One score of one session by one monitor version. The unique key makes "at most once per
-- monitor version" the database's rule: a re-run job, a worker killed mid-job or a judge
-- retry inserts with ON CONFLICT DO NOTHING and changes nothing. value is NULL and error is
-- set when the evaluator failed after its retries.
CREATE TABLE monitor_scores (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    monitor_id bigint NOT NULL REFERENCES monitors(id) ON DELETE CASCADE,
    monitor_version integer NOT NULL,
    agent_id bigint NOT NULL,
    session_id text NOT NULL,
    score_name text NOT NULL,
    kind text NOT NULL DEFAULT 'evaluator',
    -- Who scored (builtin:latency, judge, remote:NAME) and, for a judge, its prompt hash.
    evaluator text NOT NULL DEFAULT '',
    prompt_hash text,
    value double precision,
    -- A gauge's measurement (seconds, tokens, USD, count).
    raw double precision,
    passed boolean,
    comment text,
    error text,
    skipped text,
    session_settled_at timestamptz NOT NULL,
    scored_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT monitor_scores_kind CHECK (kind IN ('evaluator', 'gauge')),
    CONSTRAINT monitor_scores_value_range CHECK (value IS NULL OR (value >= 0 AND value <= 1)),
    CONSTRAINT monitor_scores_once UNIQUE (monitor_id, monitor_version, session_id, score_name),
    CONSTRAINT monitor_scores_session_fkey FOREIGN KEY (agent_id, session_id)
        REFERENCES sessions(agent_id, session_id) ON DELETE CASCADE
);
CREATE INDEX monitor_scores_monitor_time_idx ON monitor_scores (monitor_id, scored_at DESC);
