-- evalkit's database schema at migration 0021. GENERATED: do not edit.
-- The migrations (evalkit/sql/migrations/, with the SQL in evalkit/sql/schema/) are
-- the source of truth; this file shows what they build, each table with its
-- constraints, indexes, triggers and foreign keys, to read (nothing runs it).
-- After changing a migration, regenerate it: uv run python -m evalkit.sql.dump_schema
-- Left out: the per-day partitions of spans (spans_YYYYMMDD), alembic_version.
-- procrastinate's own objects (migration 0001) come last, in a section of their own.


-- ==================== evalkit ====================


CREATE FUNCTION public.evalkit_claim_runs(p_agent_id bigint, p_limit integer, p_actor text) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM agents WHERE id = p_agent_id FOR UPDATE;
    RETURN QUERY
    WITH claimed AS (
        UPDATE runs SET state = 'starting', updated_at = now()
        WHERE id IN (
            SELECT r.id
            FROM runs r
            JOIN experiments e ON e.id = r.experiment_id
            WHERE r.agent_id = p_agent_id AND r.state = 'queued' AND e.driver = 'server'
            ORDER BY r.id
            LIMIT GREATEST(0, LEAST(
                p_limit,
                (SELECT max_concurrent_runs FROM agents WHERE id = p_agent_id)
                - (SELECT count(*) FROM runs
                   WHERE agent_id = p_agent_id AND state IN ('starting', 'running', 'stopping'))
            ))
            FOR UPDATE OF r SKIP LOCKED
        )
        RETURNING runs.id
    ), logged AS (
        INSERT INTO run_events (run_id, actor, from_state, to_state, attempts, why)
        SELECT c.id, p_actor, 'queued', 'starting', 0, 'took a free slot of the agent'
        FROM claimed c
    )
    SELECT c.id FROM claimed c ORDER BY c.id;
END;
$$;


CREATE FUNCTION public.evalkit_session_over_cap(agent_id bigint, session_id text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'session % of agent % went over its size cap under a concurrent batch',
        session_id, agent_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'sessions_size_cap',
              HINT = 'count the batch again with its sessions locked (evalkit.store.otel.OverCap)';
END;
$$;


CREATE FUNCTION public.evalkit_spans_partition_create(day date) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    part text := 'spans_' || to_char(day, 'YYYYMMDD');
    lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('evalkit_spans_partitions'));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE spans INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    EXECUTE format(
        'ALTER TABLE %I ADD CONSTRAINT %I CHECK (received_at >= %L AND received_at < %L)',
        part, part || '_range', lo, hi
    );
    EXECUTE format('ALTER TABLE spans ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
    RETURN true;
END
$$;


CREATE FUNCTION public.evalkit_spans_partition_drop_before(cutoff date) RETURNS SETOF text
    LANGUAGE plpgsql
    AS $_$
DECLARE
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('evalkit_spans_partitions'));
    FOR part IN
        SELECT c.relname::text
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'spans'::regclass
          AND c.relname ~ '^spans_[0-9]{8}$'
          AND to_date(substr(c.relname, 7), 'YYYYMMDD') < cutoff
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE %I', part);
        RETURN NEXT part;
    END LOOP;
END
$_$;


CREATE FUNCTION public.run_events_guard_step() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM run_transitions_allowed
                   WHERE from_state = NEW.from_state AND to_state = NEW.to_state) THEN
        RAISE EXCEPTION 'run % cannot go from % to %', NEW.run_id, NEW.from_state, NEW.to_state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'run_transition_allowed',
                  HINT = 'the state machine (evalkit.runs.machine.ALLOWED) has no such step';
    END IF;
    RETURN NEW;
END;
$$;


CREATE FUNCTION public.runs_guard_transition() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_transitions_allowed
               WHERE from_state = OLD.state AND to_state = NEW.state) THEN
        RETURN NEW;
    END IF;
    IF OLD.state IS DISTINCT FROM NEW.state AND EXISTS (
        WITH RECURSIVE reachable (state) AS (
            SELECT to_state FROM run_transitions_allowed WHERE from_state = OLD.state
            UNION
            SELECT a.to_state FROM run_transitions_allowed a JOIN reachable r
                ON a.from_state = r.state
        )
        SELECT 1 FROM reachable WHERE state = NEW.state
    ) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'run % cannot go from % to %', OLD.id, OLD.state, NEW.state
        USING ERRCODE = 'check_violation', CONSTRAINT = 'run_transition_allowed',
              HINT = 'no chain of the steps in evalkit.runs.machine.ALLOWED leads there';
END;
$$;


-- agent_tokens

CREATE TABLE public.agent_tokens (
    id bigint NOT NULL,
    agent_id bigint NOT NULL,
    token_hash bytea NOT NULL,
    hint text NOT NULL,
    note text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone
);

ALTER TABLE public.agent_tokens ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.agent_tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.agent_tokens
    ADD CONSTRAINT agent_tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.agent_tokens
    ADD CONSTRAINT agent_tokens_token_hash_key UNIQUE (token_hash);

CREATE INDEX agent_tokens_agent_idx ON public.agent_tokens USING btree (agent_id);

ALTER TABLE ONLY public.agent_tokens
    ADD CONSTRAINT agent_tokens_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.agent_tokens
    ADD CONSTRAINT agent_tokens_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;


-- agents

CREATE TABLE public.agents (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    harness_url text,
    api_key text,
    api_key_env text,
    trajectory_source text DEFAULT 'harness'::text NOT NULL,
    max_concurrent_runs integer DEFAULT 4 NOT NULL,
    run_timeout_seconds double precision DEFAULT 600 NOT NULL,
    poll_interval_seconds double precision DEFAULT 2 NOT NULL,
    stop_grace_seconds double precision DEFAULT 30 NOT NULL,
    trajectory_wait_seconds double precision DEFAULT 60 NOT NULL,
    provides jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT agents_max_concurrent_runs_check CHECK (((max_concurrent_runs >= 1) AND (max_concurrent_runs <= 1000))),
    CONSTRAINT agents_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT agents_poll_interval_check CHECK ((poll_interval_seconds > (0)::double precision)),
    CONSTRAINT agents_run_timeout_check CHECK ((run_timeout_seconds > (0)::double precision)),
    CONSTRAINT agents_stop_grace_check CHECK ((stop_grace_seconds >= (0)::double precision)),
    CONSTRAINT agents_trajectory_source_check CHECK ((trajectory_source = ANY (ARRAY['harness'::text, 'otel'::text]))),
    CONSTRAINT agents_trajectory_wait_check CHECK ((trajectory_wait_seconds >= (0)::double precision))
);

ALTER TABLE public.agents ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.agents_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_workspace_name_key UNIQUE (workspace_id, name);

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- audit_log

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor_id bigint,
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT audit_log_action_format CHECK ((action ~ '^[a-z_]+\.[a-z_]+$'::text))
);

ALTER TABLE public.audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

CREATE INDEX audit_log_at_idx ON public.audit_log USING btree (at DESC, id DESC);

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_actor_id_fkey FOREIGN KEY (actor_id) REFERENCES public.users(id) ON DELETE SET NULL;


-- case_events

CREATE TABLE public.case_events (
    id bigint NOT NULL,
    case_pk bigint NOT NULL,
    version_id bigint,
    kind text NOT NULL,
    actor_id bigint,
    comment text,
    branch text,
    sha text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dirty boolean DEFAULT false NOT NULL,
    CONSTRAINT case_events_kind_check CHECK ((kind = ANY (ARRAY['add'::text, 'change'::text, 'remove'::text, 'restore'::text, 'approve'::text, 'reject'::text, 'comment'::text, 'promotion'::text])))
);

ALTER TABLE public.case_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.case_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.case_events
    ADD CONSTRAINT case_events_pkey PRIMARY KEY (id);

CREATE INDEX case_events_case_pk_idx ON public.case_events USING btree (case_pk, id);

ALTER TABLE ONLY public.case_events
    ADD CONSTRAINT case_events_actor_id_fkey FOREIGN KEY (actor_id) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.case_events
    ADD CONSTRAINT case_events_case_pk_fkey FOREIGN KEY (case_pk) REFERENCES public.cases(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.case_events
    ADD CONSTRAINT case_events_version_id_fkey FOREIGN KEY (version_id) REFERENCES public.case_versions(id) ON DELETE SET NULL;


-- case_versions

CREATE TABLE public.case_versions (
    id bigint NOT NULL,
    case_pk bigint NOT NULL,
    version integer NOT NULL,
    content jsonb NOT NULL,
    content_hash text NOT NULL,
    fixtures jsonb DEFAULT '{}'::jsonb NOT NULL,
    version_hash text NOT NULL,
    overlay_target text,
    source text,
    review_state text DEFAULT 'pending'::text NOT NULL,
    removed boolean DEFAULT false NOT NULL,
    promoted_from bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT case_versions_review_state_check CHECK ((review_state = ANY (ARRAY['pending'::text, 'approved'::text, 'rejected'::text]))),
    CONSTRAINT case_versions_version_check CHECK ((version >= 1))
);

ALTER TABLE public.case_versions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.case_versions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.case_versions
    ADD CONSTRAINT case_versions_case_version_key UNIQUE (case_pk, version);

ALTER TABLE ONLY public.case_versions
    ADD CONSTRAINT case_versions_pkey PRIMARY KEY (id);

CREATE INDEX case_versions_overlay_target_idx ON public.case_versions USING btree (overlay_target) WHERE (overlay_target IS NOT NULL);

ALTER TABLE ONLY public.case_versions
    ADD CONSTRAINT case_versions_case_pk_fkey FOREIGN KEY (case_pk) REFERENCES public.cases(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.case_versions
    ADD CONSTRAINT case_versions_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.case_versions
    ADD CONSTRAINT case_versions_promoted_from_fkey FOREIGN KEY (promoted_from) REFERENCES public.case_versions(id) ON DELETE SET NULL;


-- cases

CREATE TABLE public.cases (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    dataset_id bigint NOT NULL,
    case_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    current_version integer,
    CONSTRAINT cases_current_version_check CHECK ((current_version >= 1))
);

ALTER TABLE public.cases ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.cases_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.cases
    ADD CONSTRAINT cases_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.cases
    ADD CONSTRAINT cases_workspace_case_id_key UNIQUE (workspace_id, case_id);

CREATE INDEX cases_dataset_id_idx ON public.cases USING btree (dataset_id);

ALTER TABLE ONLY public.cases
    ADD CONSTRAINT cases_dataset_id_fkey FOREIGN KEY (dataset_id) REFERENCES public.datasets(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.cases
    ADD CONSTRAINT cases_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- datasets

CREATE TABLE public.datasets (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    last_sync_at timestamp with time zone,
    last_sync_branch text,
    last_sync_sha text,
    last_sync_actor_id bigint,
    last_sync_dirty boolean DEFAULT false NOT NULL,
    CONSTRAINT datasets_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text))
);

ALTER TABLE public.datasets ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.datasets_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.datasets
    ADD CONSTRAINT datasets_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.datasets
    ADD CONSTRAINT datasets_workspace_name_key UNIQUE (workspace_id, name);

ALTER TABLE ONLY public.datasets
    ADD CONSTRAINT datasets_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.datasets
    ADD CONSTRAINT datasets_last_sync_actor_id_fkey FOREIGN KEY (last_sync_actor_id) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.datasets
    ADD CONSTRAINT datasets_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- evaluators

CREATE TABLE public.evaluators (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    endpoint text NOT NULL,
    kind text DEFAULT 'score'::text NOT NULL,
    api_key text,
    api_key_env text,
    timeout_seconds double precision DEFAULT 30 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT evaluators_kind_check CHECK ((kind = ANY (ARRAY['score'::text, 'gauge'::text]))),
    CONSTRAINT evaluators_name_format CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'::text)),
    CONSTRAINT evaluators_timeout_check CHECK ((timeout_seconds > (0)::double precision))
);

ALTER TABLE public.evaluators ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.evaluators_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.evaluators
    ADD CONSTRAINT evaluators_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.evaluators
    ADD CONSTRAINT evaluators_workspace_name_key UNIQUE (workspace_id, name);

ALTER TABLE ONLY public.evaluators
    ADD CONSTRAINT evaluators_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.evaluators
    ADD CONSTRAINT evaluators_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- experiments

CREATE TABLE public.experiments (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    dataset_id bigint NOT NULL,
    agent_id bigint NOT NULL,
    driver text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    repetitions integer DEFAULT 1 NOT NULL,
    model text,
    split text,
    case_ids text[],
    capabilities jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    finished_at timestamp with time zone,
    summary jsonb,
    scoring_round integer DEFAULT 1 NOT NULL,
    judge_by text,
    judge text,
    judge_model text,
    judge_base_url text,
    judge_prompt_hash text,
    CONSTRAINT experiments_driver_check CHECK ((driver = ANY (ARRAY['server'::text, 'cli'::text, 'sdk'::text]))),
    CONSTRAINT experiments_judge_by_check CHECK ((judge_by = ANY (ARRAY['server'::text, 'sdk'::text]))),
    CONSTRAINT experiments_judge_named_check CHECK (((judge_by IS NULL) = (judge IS NULL))),
    CONSTRAINT experiments_repetitions_check CHECK (((repetitions >= 1) AND (repetitions <= 100))),
    CONSTRAINT experiments_status_check CHECK ((status = ANY (ARRAY['running'::text, 'finished'::text])))
);

ALTER TABLE public.experiments ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.experiments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.experiments
    ADD CONSTRAINT experiments_pkey PRIMARY KEY (id);

CREATE INDEX experiments_workspace_idx ON public.experiments USING btree (workspace_id, id DESC);

ALTER TABLE ONLY public.experiments
    ADD CONSTRAINT experiments_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.experiments
    ADD CONSTRAINT experiments_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.experiments
    ADD CONSTRAINT experiments_dataset_id_fkey FOREIGN KEY (dataset_id) REFERENCES public.datasets(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.experiments
    ADD CONSTRAINT experiments_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- fixtures

CREATE TABLE public.fixtures (
    sha256 text NOT NULL,
    size bigint NOT NULL,
    blob_key text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT fixtures_sha256_format CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT fixtures_size_check CHECK ((size >= 0))
);

ALTER TABLE ONLY public.fixtures
    ADD CONSTRAINT fixtures_pkey PRIMARY KEY (sha256);

ALTER TABLE ONLY public.fixtures
    ADD CONSTRAINT fixtures_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;


-- judge_examples

CREATE TABLE public.judge_examples (
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    examples jsonb NOT NULL,
    prompt_hash text NOT NULL,
    proposal_id bigint,
    accepted_by bigint,
    accepted_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.judge_examples
    ADD CONSTRAINT judge_examples_pkey PRIMARY KEY (workspace_id, name);

ALTER TABLE ONLY public.judge_examples
    ADD CONSTRAINT judge_examples_accepted_by_fkey FOREIGN KEY (accepted_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.judge_examples
    ADD CONSTRAINT judge_examples_proposal_id_fkey FOREIGN KEY (proposal_id) REFERENCES public.judge_proposals(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.judge_examples
    ADD CONSTRAINT judge_examples_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- judge_proposals

CREATE TABLE public.judge_proposals (
    id bigint NOT NULL,
    experiment_id bigint NOT NULL,
    name text NOT NULL,
    examples jsonb NOT NULL,
    prompt_hash text NOT NULL,
    base_hash text NOT NULL,
    trial_round integer NOT NULL,
    runs integer NOT NULL,
    before jsonb NOT NULL,
    created_by bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    accepted_by bigint,
    accepted_at timestamp with time zone,
    CONSTRAINT judge_proposals_new_prompt CHECK ((prompt_hash <> base_hash)),
    CONSTRAINT judge_proposals_trial_round_check CHECK ((trial_round < 0))
);

ALTER TABLE public.judge_proposals ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.judge_proposals_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.judge_proposals
    ADD CONSTRAINT judge_proposals_experiment_id_trial_round_key UNIQUE (experiment_id, trial_round);

ALTER TABLE ONLY public.judge_proposals
    ADD CONSTRAINT judge_proposals_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.judge_proposals
    ADD CONSTRAINT judge_proposals_accepted_by_fkey FOREIGN KEY (accepted_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.judge_proposals
    ADD CONSTRAINT judge_proposals_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.judge_proposals
    ADD CONSTRAINT judge_proposals_experiment_id_fkey FOREIGN KEY (experiment_id) REFERENCES public.experiments(id) ON DELETE CASCADE;


-- labels

CREATE TABLE public.labels (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    name text NOT NULL,
    value double precision NOT NULL,
    comment text,
    user_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT labels_value_check CHECK (((value >= (0)::double precision) AND (value <= (1)::double precision)))
);

ALTER TABLE public.labels ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.labels_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.labels
    ADD CONSTRAINT labels_pkey PRIMARY KEY (id);

CREATE INDEX labels_by_run ON public.labels USING btree (run_id, name, id);

ALTER TABLE ONLY public.labels
    ADD CONSTRAINT labels_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.labels
    ADD CONSTRAINT labels_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE SET NULL;


-- llm_providers

CREATE TABLE public.llm_providers (
    id bigint NOT NULL,
    name text NOT NULL,
    base_url text NOT NULL,
    api_key text,
    api_key_env text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT llm_providers_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text))
);

ALTER TABLE public.llm_providers ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.llm_providers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.llm_providers
    ADD CONSTRAINT llm_providers_name_key UNIQUE (name);

ALTER TABLE ONLY public.llm_providers
    ADD CONSTRAINT llm_providers_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.llm_providers
    ADD CONSTRAINT llm_providers_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;


-- login_failures

CREATE TABLE public.login_failures (
    key text NOT NULL,
    failures integer NOT NULL,
    last_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    blocked_until timestamp with time zone,
    CONSTRAINT login_failures_failures_check CHECK ((failures > 0)),
    CONSTRAINT login_failures_key_format CHECK ((key ~ '^(user|addr):.+$'::text))
);

ALTER TABLE ONLY public.login_failures
    ADD CONSTRAINT login_failures_pkey PRIMARY KEY (key);


-- login_tokens

CREATE TABLE public.login_tokens (
    id bigint NOT NULL,
    user_id bigint NOT NULL,
    token_hash bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone
);

ALTER TABLE public.login_tokens ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.login_tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.login_tokens
    ADD CONSTRAINT login_tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.login_tokens
    ADD CONSTRAINT login_tokens_token_hash_key UNIQUE (token_hash);

CREATE INDEX login_tokens_expires_at_idx ON public.login_tokens USING btree (expires_at);

CREATE INDEX login_tokens_user_id_idx ON public.login_tokens USING btree (user_id);

ALTER TABLE ONLY public.login_tokens
    ADD CONSTRAINT login_tokens_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;


-- memberships

CREATE TABLE public.memberships (
    workspace_id bigint NOT NULL,
    user_id bigint NOT NULL,
    role text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT memberships_role_check CHECK ((role = ANY (ARRAY['writer'::text, 'reviewer'::text])))
);

ALTER TABLE ONLY public.memberships
    ADD CONSTRAINT memberships_pkey PRIMARY KEY (workspace_id, user_id);

ALTER TABLE ONLY public.memberships
    ADD CONSTRAINT memberships_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.memberships
    ADD CONSTRAINT memberships_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- monitor_scores

CREATE TABLE public.monitor_scores (
    id bigint NOT NULL,
    monitor_id bigint NOT NULL,
    monitor_version integer NOT NULL,
    agent_id bigint NOT NULL,
    session_id text NOT NULL,
    score_name text NOT NULL,
    kind text DEFAULT 'evaluator'::text NOT NULL,
    evaluator text DEFAULT ''::text NOT NULL,
    prompt_hash text,
    value double precision,
    raw double precision,
    passed boolean,
    comment text,
    error text,
    skipped text,
    session_settled_at timestamp with time zone NOT NULL,
    scored_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT monitor_scores_kind CHECK ((kind = ANY (ARRAY['evaluator'::text, 'gauge'::text]))),
    CONSTRAINT monitor_scores_value_range CHECK (((value IS NULL) OR ((value >= (0)::double precision) AND (value <= (1)::double precision))))
);

ALTER TABLE public.monitor_scores ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.monitor_scores_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.monitor_scores
    ADD CONSTRAINT monitor_scores_once UNIQUE (monitor_id, monitor_version, session_id, score_name);

ALTER TABLE ONLY public.monitor_scores
    ADD CONSTRAINT monitor_scores_pkey PRIMARY KEY (id);

CREATE INDEX monitor_scores_monitor_time_idx ON public.monitor_scores USING btree (monitor_id, scored_at DESC);

ALTER TABLE ONLY public.monitor_scores
    ADD CONSTRAINT monitor_scores_monitor_id_fkey FOREIGN KEY (monitor_id) REFERENCES public.monitors(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.monitor_scores
    ADD CONSTRAINT monitor_scores_session_fkey FOREIGN KEY (agent_id, session_id) REFERENCES public.sessions(agent_id, session_id) ON DELETE CASCADE;


-- monitor_sessions

CREATE TABLE public.monitor_sessions (
    monitor_id bigint NOT NULL,
    monitor_version integer NOT NULL,
    agent_id bigint NOT NULL,
    session_id text NOT NULL,
    backfill boolean DEFAULT false NOT NULL,
    taken_at timestamp with time zone DEFAULT now() NOT NULL,
    scored_at timestamp with time zone
);

ALTER TABLE ONLY public.monitor_sessions
    ADD CONSTRAINT monitor_sessions_pkey PRIMARY KEY (monitor_id, monitor_version, session_id);

CREATE INDEX monitor_sessions_taken_idx ON public.monitor_sessions USING btree (monitor_id, taken_at DESC);

ALTER TABLE ONLY public.monitor_sessions
    ADD CONSTRAINT monitor_sessions_monitor_id_fkey FOREIGN KEY (monitor_id) REFERENCES public.monitors(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.monitor_sessions
    ADD CONSTRAINT monitor_sessions_session_fkey FOREIGN KEY (agent_id, session_id) REFERENCES public.sessions(agent_id, session_id) ON DELETE CASCADE;


-- monitors

CREATE TABLE public.monitors (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    agent_id bigint NOT NULL,
    version integer DEFAULT 1 NOT NULL,
    sample_rate double precision NOT NULL,
    cap_per_hour integer,
    builtins text[] DEFAULT '{}'::text[] NOT NULL,
    evaluator_ids bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    rubric text,
    created_by bigint,
    scanned_until timestamp with time zone DEFAULT now() NOT NULL,
    capped_sessions bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT monitors_cap_positive CHECK (((cap_per_hour IS NULL) OR (cap_per_hour > 0))),
    CONSTRAINT monitors_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT monitors_sample_rate_range CHECK (((sample_rate >= (0)::double precision) AND (sample_rate <= (1)::double precision))),
    CONSTRAINT monitors_version_positive CHECK ((version > 0))
);

ALTER TABLE public.monitors ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.monitors_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.monitors
    ADD CONSTRAINT monitors_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.monitors
    ADD CONSTRAINT monitors_workspace_name_key UNIQUE (workspace_id, name);

CREATE INDEX monitors_agent_idx ON public.monitors USING btree (agent_id);

ALTER TABLE ONLY public.monitors
    ADD CONSTRAINT monitors_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.monitors
    ADD CONSTRAINT monitors_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.monitors
    ADD CONSTRAINT monitors_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- promotions

CREATE TABLE public.promotions (
    source_id bigint NOT NULL,
    target_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT promotions_not_self CHECK ((source_id <> target_id))
);

ALTER TABLE ONLY public.promotions
    ADD CONSTRAINT promotions_source_key UNIQUE (source_id);

ALTER TABLE ONLY public.promotions
    ADD CONSTRAINT promotions_target_key UNIQUE (target_id);

ALTER TABLE ONLY public.promotions
    ADD CONSTRAINT promotions_source_id_fkey FOREIGN KEY (source_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.promotions
    ADD CONSTRAINT promotions_target_id_fkey FOREIGN KEY (target_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- run_events

CREATE TABLE public.run_events (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    attempts integer NOT NULL,
    why text
);

CREATE SEQUENCE public.run_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.run_events_id_seq OWNED BY public.run_events.id;

ALTER TABLE ONLY public.run_events ALTER COLUMN id SET DEFAULT nextval('public.run_events_id_seq'::regclass);

ALTER TABLE ONLY public.run_events
    ADD CONSTRAINT run_events_pkey PRIMARY KEY (id);

CREATE INDEX run_events_run_idx ON public.run_events USING btree (run_id, id);

CREATE TRIGGER run_events_guard_step BEFORE INSERT ON public.run_events FOR EACH ROW EXECUTE FUNCTION public.run_events_guard_step();

ALTER TABLE ONLY public.run_events
    ADD CONSTRAINT run_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


-- run_transitions_allowed

CREATE TABLE public.run_transitions_allowed (
    from_state text NOT NULL,
    to_state text NOT NULL
);

ALTER TABLE ONLY public.run_transitions_allowed
    ADD CONSTRAINT run_transitions_allowed_pkey PRIMARY KEY (from_state, to_state);


-- runs

CREATE TABLE public.runs (
    id bigint NOT NULL,
    experiment_id bigint NOT NULL,
    agent_id bigint NOT NULL,
    case_version_id bigint NOT NULL,
    target_version_id bigint,
    case_id text NOT NULL,
    repetition integer DEFAULT 1 NOT NULL,
    state text DEFAULT 'queued'::text NOT NULL,
    harness_run_id text,
    harness_status text,
    session_id text,
    answer text,
    output jsonb,
    error text,
    timed_out boolean DEFAULT false NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    deadline_at timestamp with time zone,
    stop_requested_at timestamp with time zone,
    harness_done_at timestamp with time zone,
    finished_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT runs_repetition_check CHECK ((repetition >= 1)),
    CONSTRAINT runs_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'starting'::text, 'running'::text, 'stopping'::text, 'collecting'::text, 'scoring'::text, 'done'::text, 'failed'::text, 'errored'::text])))
);

ALTER TABLE public.runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_experiment_case_repetition_key UNIQUE (experiment_id, case_version_id, repetition);

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);

CREATE INDEX runs_agent_in_flight_idx ON public.runs USING btree (agent_id) WHERE (state = ANY (ARRAY['starting'::text, 'running'::text, 'stopping'::text]));

CREATE INDEX runs_agent_queued_idx ON public.runs USING btree (agent_id, id) WHERE (state = 'queued'::text);

CREATE INDEX runs_agent_session_idx ON public.runs USING btree (agent_id, session_id) WHERE (session_id IS NOT NULL);

CREATE INDEX runs_experiment_idx ON public.runs USING btree (experiment_id, id);

CREATE INDEX runs_live_idx ON public.runs USING btree (experiment_id) WHERE (state <> ALL (ARRAY['done'::text, 'failed'::text, 'errored'::text]));

CREATE TRIGGER runs_guard_transition BEFORE UPDATE OF state, attempts ON public.runs FOR EACH ROW WHEN (((old.state IS DISTINCT FROM new.state) OR (old.attempts IS DISTINCT FROM new.attempts))) EXECUTE FUNCTION public.runs_guard_transition();

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_case_version_id_fkey FOREIGN KEY (case_version_id) REFERENCES public.case_versions(id);

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_experiment_id_fkey FOREIGN KEY (experiment_id) REFERENCES public.experiments(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_target_version_id_fkey FOREIGN KEY (target_version_id) REFERENCES public.case_versions(id);


-- schedules

CREATE TABLE public.schedules (
    id bigint NOT NULL,
    workspace_id bigint NOT NULL,
    name text NOT NULL,
    dataset_id bigint NOT NULL,
    agent_id bigint NOT NULL,
    cron text NOT NULL,
    split text,
    case_ids text[],
    repetitions integer DEFAULT 1 NOT NULL,
    model text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    next_fire_at timestamp with time zone NOT NULL,
    last_fire_at timestamp with time zone,
    fires integer DEFAULT 0 NOT NULL,
    latest_experiment_id bigint,
    last_error text,
    CONSTRAINT schedules_fire_order_check CHECK (((last_fire_at IS NULL) OR (last_fire_at < next_fire_at))),
    CONSTRAINT schedules_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT schedules_repetitions_check CHECK (((repetitions >= 1) AND (repetitions <= 100)))
);

ALTER TABLE public.schedules ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.schedules_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_workspace_name_key UNIQUE (workspace_id, name);

CREATE INDEX schedules_due_idx ON public.schedules USING btree (next_fire_at);

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_dataset_id_fkey FOREIGN KEY (dataset_id) REFERENCES public.datasets(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_latest_experiment_id_fkey FOREIGN KEY (latest_experiment_id) REFERENCES public.experiments(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES public.workspaces(id) ON DELETE CASCADE;


-- scores

CREATE TABLE public.scores (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    round integer DEFAULT 1 NOT NULL,
    name text NOT NULL,
    value double precision,
    kind text DEFAULT 'evaluator'::text NOT NULL,
    explanation text,
    error text,
    skipped text,
    evaluator text NOT NULL,
    evaluator_version text,
    judge_model text,
    prompt_hash text,
    raw jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT scores_kind_check CHECK ((kind = ANY (ARRAY['evaluator'::text, 'gauge'::text]))),
    CONSTRAINT scores_value_check CHECK (((value IS NULL) OR ((value >= (0)::double precision) AND (value <= (1)::double precision))))
);

ALTER TABLE public.scores ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.scores_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.scores
    ADD CONSTRAINT scores_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.scores
    ADD CONSTRAINT scores_run_round_name_key UNIQUE (run_id, round, name);

ALTER TABLE ONLY public.scores
    ADD CONSTRAINT scores_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


-- scoring_rounds

CREATE TABLE public.scoring_rounds (
    experiment_id bigint NOT NULL,
    round integer NOT NULL,
    evaluators text[],
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT scoring_rounds_round_check CHECK ((round >= 1))
);

ALTER TABLE ONLY public.scoring_rounds
    ADD CONSTRAINT scoring_rounds_pkey PRIMARY KEY (experiment_id, round);

ALTER TABLE ONLY public.scoring_rounds
    ADD CONSTRAINT scoring_rounds_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.scoring_rounds
    ADD CONSTRAINT scoring_rounds_experiment_id_fkey FOREIGN KEY (experiment_id) REFERENCES public.experiments(id) ON DELETE CASCADE;


-- server_settings

CREATE TABLE public.server_settings (
    key text NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by bigint
);

ALTER TABLE ONLY public.server_settings
    ADD CONSTRAINT server_settings_pkey PRIMARY KEY (key);

ALTER TABLE ONLY public.server_settings
    ADD CONSTRAINT server_settings_updated_by_fkey FOREIGN KEY (updated_by) REFERENCES public.users(id) ON DELETE SET NULL;


-- sessions

CREATE TABLE public.sessions (
    agent_id bigint NOT NULL,
    session_id text NOT NULL,
    run_id bigint,
    first_span_at timestamp with time zone,
    last_span_at timestamp with time zone,
    first_received_at timestamp with time zone DEFAULT now() NOT NULL,
    last_received_at timestamp with time zone DEFAULT now() NOT NULL,
    span_count integer DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    rejected_spans integer DEFAULT 0 NOT NULL,
    truncated boolean DEFAULT false NOT NULL
);

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (agent_id, session_id);

CREATE INDEX sessions_agent_last_received_idx ON public.sessions USING btree (agent_id, last_received_at DESC);

CREATE INDEX sessions_last_received_idx ON public.sessions USING btree (last_received_at DESC);

CREATE INDEX sessions_run_idx ON public.sessions USING btree (run_id) WHERE (run_id IS NOT NULL);

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE SET NULL;


-- span_mappings

CREATE TABLE public.span_mappings (
    id bigint NOT NULL,
    agent_id bigint NOT NULL,
    version integer NOT NULL,
    state text DEFAULT 'draft'::text NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by bigint,
    CONSTRAINT span_mappings_state_check CHECK ((state = ANY (ARRAY['draft'::text, 'active'::text, 'retired'::text])))
);

ALTER TABLE public.span_mappings ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.span_mappings_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.span_mappings
    ADD CONSTRAINT span_mappings_agent_version_key UNIQUE (agent_id, version);

ALTER TABLE ONLY public.span_mappings
    ADD CONSTRAINT span_mappings_pkey PRIMARY KEY (id);

CREATE UNIQUE INDEX span_mappings_one_active_idx ON public.span_mappings USING btree (agent_id) WHERE (state = 'active'::text);

ALTER TABLE ONLY public.span_mappings
    ADD CONSTRAINT span_mappings_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES public.agents(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.span_mappings
    ADD CONSTRAINT span_mappings_created_by_fkey FOREIGN KEY (created_by) REFERENCES public.users(id) ON DELETE SET NULL;


-- spans

CREATE TABLE public.spans (
    received_at timestamp with time zone NOT NULL,
    agent_id bigint NOT NULL,
    trace_id bytea NOT NULL,
    span_id bytea NOT NULL,
    parent_span_id bytea,
    name text NOT NULL,
    kind smallint NOT NULL,
    start_ns bigint NOT NULL,
    end_ns bigint NOT NULL,
    status_code smallint NOT NULL,
    status_message text,
    scope text,
    body bytea NOT NULL,
    resource bytea NOT NULL,
    size integer NOT NULL
)
PARTITION BY RANGE (received_at);

CREATE INDEX spans_agent_trace_idx ON ONLY public.spans USING btree (agent_id, trace_id);


-- trace_sessions

CREATE TABLE public.trace_sessions (
    agent_id bigint NOT NULL,
    trace_id bytea NOT NULL,
    session_id text,
    pending_spans integer DEFAULT 0 NOT NULL,
    pending_bytes bigint DEFAULT 0 NOT NULL,
    first_span_at timestamp with time zone,
    last_span_at timestamp with time zone,
    last_received_at timestamp with time zone DEFAULT now() NOT NULL,
    orphan boolean DEFAULT false NOT NULL,
    first_received_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.trace_sessions
    ADD CONSTRAINT trace_sessions_pkey PRIMARY KEY (agent_id, trace_id);

CREATE INDEX trace_sessions_session_idx ON public.trace_sessions USING btree (agent_id, session_id);

CREATE INDEX trace_sessions_unassigned_idx ON public.trace_sessions USING btree (orphan, agent_id) WHERE (session_id IS NULL);


-- trajectories

CREATE TABLE public.trajectories (
    run_id bigint NOT NULL,
    source text NOT NULL,
    body jsonb,
    raw text,
    partial boolean DEFAULT false NOT NULL,
    valid boolean NOT NULL,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT trajectories_source_check CHECK ((source = ANY (ARRAY['harness'::text, 'otel'::text, 'sdk'::text])))
);

ALTER TABLE ONLY public.trajectories
    ADD CONSTRAINT trajectories_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY public.trajectories
    ADD CONSTRAINT trajectories_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


-- users

CREATE TABLE public.users (
    id bigint NOT NULL,
    username text NOT NULL,
    password_hash text,
    is_admin boolean DEFAULT false NOT NULL,
    oidc_subject text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    CONSTRAINT users_username_format CHECK ((username ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text))
);

ALTER TABLE public.users ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.users_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_oidc_subject_key UNIQUE (oidc_subject);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_username_key UNIQUE (username);


-- workspaces

CREATE TABLE public.workspaces (
    id bigint NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    owner_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workspaces_kind_check CHECK ((kind = ANY (ARRAY['personal'::text, 'shared'::text]))),
    CONSTRAINT workspaces_name_format CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT workspaces_personal_has_owner CHECK (((kind = 'personal'::text) = (owner_id IS NOT NULL)))
);

ALTER TABLE public.workspaces ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.workspaces_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.workspaces
    ADD CONSTRAINT workspaces_name_key UNIQUE (name);

ALTER TABLE ONLY public.workspaces
    ADD CONSTRAINT workspaces_pkey PRIMARY KEY (id);

CREATE UNIQUE INDEX workspaces_one_personal_per_user ON public.workspaces USING btree (owner_id) WHERE (kind = 'personal'::text);

ALTER TABLE ONLY public.workspaces
    ADD CONSTRAINT workspaces_owner_id_fkey FOREIGN KEY (owner_id) REFERENCES public.users(id);


-- ==================== procrastinate (the job queue's own schema) ====================


CREATE TYPE public.procrastinate_job_event_type AS ENUM (
    'deferred',
    'started',
    'deferred_for_retry',
    'failed',
    'succeeded',
    'cancelled',
    'abort_requested',
    'aborted',
    'scheduled',
    'retried'
);


CREATE TYPE public.procrastinate_job_status AS ENUM (
    'todo',
    'doing',
    'succeeded',
    'failed',
    'cancelled',
    'aborting',
    'aborted'
);


CREATE TYPE public.procrastinate_job_to_defer_v1 AS (
	queue_name character varying,
	task_name character varying,
	priority integer,
	lock text,
	queueing_lock text,
	args jsonb,
	scheduled_at timestamp with time zone
);


CREATE FUNCTION public.procrastinate_cancel_job_v1(job_id bigint, abort boolean, delete_job boolean) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    _job_id bigint;
BEGIN
    IF delete_job THEN
        DELETE FROM procrastinate_jobs
        WHERE id = job_id AND status = 'todo'
        RETURNING id INTO _job_id;
    END IF;
    IF _job_id IS NULL THEN
        IF abort THEN
            UPDATE procrastinate_jobs
            SET abort_requested = true,
                status = CASE status
                    WHEN 'todo' THEN 'cancelled'::procrastinate_job_status ELSE status
                END
            WHERE id = job_id AND status IN ('todo', 'doing')
            RETURNING id INTO _job_id;
        ELSE
            UPDATE procrastinate_jobs
            SET status = 'cancelled'::procrastinate_job_status
            WHERE id = job_id AND status = 'todo'
            RETURNING id INTO _job_id;
        END IF;
    END IF;
    RETURN _job_id;
END;
$$;


CREATE FUNCTION public.procrastinate_defer_jobs_v1(jobs public.procrastinate_job_to_defer_v1[]) RETURNS bigint[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    job_ids bigint[];
BEGIN
    WITH inserted_jobs AS (
        INSERT INTO procrastinate_jobs (queue_name, task_name, priority, lock, queueing_lock, args, scheduled_at)
        SELECT (job).queue_name,
               (job).task_name,
               (job).priority,
               (job).lock,
               (job).queueing_lock,
               (job).args,
               (job).scheduled_at
        FROM unnest(jobs) AS job
        RETURNING id
    )
    SELECT array_agg(id) FROM inserted_jobs INTO job_ids;

    RETURN job_ids;
END;
$$;


CREATE FUNCTION public.procrastinate_defer_periodic_job_v2(_queue_name character varying, _lock character varying, _queueing_lock character varying, _task_name character varying, _priority integer, _periodic_id character varying, _defer_timestamp bigint, _args jsonb) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
	_job_id bigint;
	_defer_id bigint;
BEGIN
    INSERT
        INTO procrastinate_periodic_defers (task_name, periodic_id, defer_timestamp)
        VALUES (_task_name, _periodic_id, _defer_timestamp)
        ON CONFLICT DO NOTHING
        RETURNING id into _defer_id;

    IF _defer_id IS NULL THEN
        RETURN NULL;
    END IF;

    UPDATE procrastinate_periodic_defers
        SET job_id = (
            SELECT COALESCE((
                SELECT unnest(procrastinate_defer_jobs_v1(
                    ARRAY[
                        ROW(
                            _queue_name,
                            _task_name,
                            _priority,
                            _lock,
                            _queueing_lock,
                            _args,
                            NULL::timestamptz
                        )
                    ]::procrastinate_job_to_defer_v1[]
                ))
            ), NULL)
        )
        WHERE id = _defer_id
        RETURNING job_id INTO _job_id;

    DELETE
        FROM procrastinate_periodic_defers
        USING (
            SELECT id
            FROM procrastinate_periodic_defers
            WHERE procrastinate_periodic_defers.task_name = _task_name
            AND procrastinate_periodic_defers.periodic_id = _periodic_id
            AND procrastinate_periodic_defers.defer_timestamp < _defer_timestamp
            ORDER BY id
            FOR UPDATE
        ) to_delete
        WHERE procrastinate_periodic_defers.id = to_delete.id;

    RETURN _job_id;
END;
$$;


CREATE FUNCTION public.procrastinate_fetch_job_v2(target_queue_names character varying[], p_worker_id bigint) RETURNS public.procrastinate_jobs
    LANGUAGE plpgsql
    AS $$
DECLARE
	found_jobs procrastinate_jobs;
BEGIN
    WITH candidate AS (
        SELECT jobs.*
            FROM procrastinate_jobs AS jobs
            WHERE
                -- reject the job if its lock has earlier or higher priority jobs
                NOT EXISTS (
                    SELECT 1
                        FROM procrastinate_jobs AS other_jobs
                        WHERE
                            jobs.lock IS NOT NULL
                            AND other_jobs.lock = jobs.lock
                            AND (
                                -- job with same lock is already running
                                other_jobs.status = 'doing'
                                OR
                                -- job with same lock is waiting and has higher priority (or same priority but was queued first)
                                (
                                    other_jobs.status = 'todo'
                                    AND (
                                        other_jobs.priority > jobs.priority
                                        OR (
                                        other_jobs.priority = jobs.priority
                                        AND other_jobs.id < jobs.id
                                        )
                                    )
                                )
                            )
                )
                AND jobs.status = 'todo'
                AND (target_queue_names IS NULL OR jobs.queue_name = ANY( target_queue_names ))
                AND (jobs.scheduled_at IS NULL OR jobs.scheduled_at <= now())
            ORDER BY jobs.priority DESC, jobs.id ASC LIMIT 1
            FOR UPDATE OF jobs SKIP LOCKED
    )
    UPDATE procrastinate_jobs
        SET status = 'doing', worker_id = p_worker_id
        FROM candidate
        WHERE procrastinate_jobs.id = candidate.id
        RETURNING procrastinate_jobs.* INTO found_jobs;

 RETURN found_jobs;
END;
$$;


CREATE FUNCTION public.procrastinate_finish_job_v1(job_id bigint, end_status public.procrastinate_job_status, delete_job boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    _job_id bigint;
BEGIN
    IF end_status NOT IN ('succeeded', 'failed', 'aborted') THEN
        RAISE 'End status should be either "succeeded", "failed" or "aborted" (job id: %)', job_id;
    END IF;
    IF delete_job THEN
        DELETE FROM procrastinate_jobs
        WHERE id = job_id AND status IN ('todo', 'doing')
        RETURNING id INTO _job_id;
    ELSE
        UPDATE procrastinate_jobs
        SET status = end_status,
            abort_requested = false,
            attempts = CASE status
                WHEN 'doing' THEN attempts + 1 ELSE attempts
            END
        WHERE id = job_id AND status IN ('todo', 'doing')
        RETURNING id INTO _job_id;
    END IF;
    IF _job_id IS NULL THEN
        RAISE 'Job was not found or not in "doing" or "todo" status (job id: %)', job_id;
    END IF;
END;
$$;


CREATE FUNCTION public.procrastinate_notify_queue_abort_job_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    payload TEXT;
BEGIN
    SELECT json_build_object('type', 'abort_job_requested', 'job_id', NEW.id)::text INTO payload;
	PERFORM pg_notify('procrastinate_queue_v1#' || NEW.queue_name, payload);
	PERFORM pg_notify('procrastinate_any_queue_v1', payload);
	RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_notify_queue_job_inserted_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    payload TEXT;
BEGIN
    SELECT json_build_object('type', 'job_inserted', 'job_id', NEW.id)::text INTO payload;
	PERFORM pg_notify('procrastinate_queue_v1#' || NEW.queue_name, payload);
	PERFORM pg_notify('procrastinate_any_queue_v1', payload);
	RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_prune_stalled_workers_v1(seconds_since_heartbeat double precision) RETURNS TABLE(worker_id bigint)
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    DELETE FROM procrastinate_workers
    WHERE last_heartbeat < NOW() - (seconds_since_heartbeat || 'SECOND')::INTERVAL
    RETURNING procrastinate_workers.id;
END;
$$;


CREATE FUNCTION public.procrastinate_register_worker_v1() RETURNS TABLE(worker_id bigint)
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    INSERT INTO procrastinate_workers DEFAULT VALUES
    RETURNING procrastinate_workers.id;
END;
$$;


CREATE FUNCTION public.procrastinate_retry_job_v1(job_id bigint, retry_at timestamp with time zone, new_priority integer, new_queue_name character varying, new_lock character varying) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    _job_id bigint;
    _abort_requested boolean;
BEGIN
    SELECT abort_requested FROM procrastinate_jobs
    WHERE id = job_id AND status = 'doing'
    FOR UPDATE
    INTO _abort_requested;
    IF _abort_requested THEN
        UPDATE procrastinate_jobs
        SET status = 'failed'::procrastinate_job_status
        WHERE id = job_id AND status = 'doing'
        RETURNING id INTO _job_id;
    ELSE
        UPDATE procrastinate_jobs
        SET status = 'todo'::procrastinate_job_status,
            attempts = attempts + 1,
            scheduled_at = retry_at,
            priority = COALESCE(new_priority, priority),
            queue_name = COALESCE(new_queue_name, queue_name),
            lock = COALESCE(new_lock, lock)
        WHERE id = job_id AND status = 'doing'
        RETURNING id INTO _job_id;
    END IF;

    IF _job_id IS NULL THEN
        RAISE 'Job was not found or not in "doing" status (job id: %)', job_id;
    END IF;
END;
$$;


CREATE FUNCTION public.procrastinate_retry_job_v2(job_id bigint, retry_at timestamp with time zone, new_priority integer, new_queue_name character varying, new_lock character varying) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    _job_id bigint;
    _abort_requested boolean;
    _current_status procrastinate_job_status;
BEGIN
    SELECT status, abort_requested FROM procrastinate_jobs
    WHERE id = job_id AND status IN ('doing', 'failed')
    FOR UPDATE
    INTO _current_status, _abort_requested;
    IF _current_status = 'doing' AND _abort_requested THEN
        UPDATE procrastinate_jobs
        SET status = 'failed'::procrastinate_job_status
        WHERE id = job_id AND status = 'doing'
        RETURNING id INTO _job_id;
    ELSE
        UPDATE procrastinate_jobs
        SET status = 'todo'::procrastinate_job_status,
            attempts = attempts + 1,
            scheduled_at = retry_at,
            priority = COALESCE(new_priority, priority),
            queue_name = COALESCE(new_queue_name, queue_name),
            lock = COALESCE(new_lock, lock)
        WHERE id = job_id AND status IN ('doing', 'failed')
        RETURNING id INTO _job_id;
    END IF;

    IF _job_id IS NULL THEN
        RAISE 'Job was not found or has an invalid status to retry (job id: %)', job_id;
    END IF;

END;
$$;


CREATE FUNCTION public.procrastinate_trigger_abort_requested_events_procedure_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO procrastinate_events(job_id, type)
        VALUES (NEW.id, 'abort_requested'::procrastinate_job_event_type);
    RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_trigger_function_scheduled_events_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO procrastinate_events(job_id, type, at)
        VALUES (NEW.id, 'scheduled'::procrastinate_job_event_type, NEW.scheduled_at);

	RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_trigger_function_status_events_insert_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO procrastinate_events(job_id, type)
        VALUES (NEW.id, 'deferred'::procrastinate_job_event_type);
	RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_trigger_function_status_events_update_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH t AS (
        SELECT CASE
            WHEN OLD.status = 'todo'::procrastinate_job_status
                AND NEW.status = 'doing'::procrastinate_job_status
                THEN 'started'::procrastinate_job_event_type
            WHEN OLD.status = 'doing'::procrastinate_job_status
                AND NEW.status = 'todo'::procrastinate_job_status
                THEN 'deferred_for_retry'::procrastinate_job_event_type
            WHEN OLD.status = 'doing'::procrastinate_job_status
                AND NEW.status = 'failed'::procrastinate_job_status
                THEN 'failed'::procrastinate_job_event_type
            WHEN OLD.status = 'doing'::procrastinate_job_status
                AND NEW.status = 'succeeded'::procrastinate_job_status
                THEN 'succeeded'::procrastinate_job_event_type
            WHEN OLD.status = 'todo'::procrastinate_job_status
                AND (
                    NEW.status = 'cancelled'::procrastinate_job_status
                    OR NEW.status = 'failed'::procrastinate_job_status
                    OR NEW.status = 'succeeded'::procrastinate_job_status
                )
                THEN 'cancelled'::procrastinate_job_event_type
            WHEN OLD.status = 'doing'::procrastinate_job_status
                AND NEW.status = 'aborted'::procrastinate_job_status
                THEN 'aborted'::procrastinate_job_event_type
            WHEN OLD.status = 'failed'::procrastinate_job_status
                AND NEW.status = 'todo'::procrastinate_job_status
                THEN 'retried'::procrastinate_job_event_type
            ELSE NULL
        END as event_type
    )
    INSERT INTO procrastinate_events(job_id, type)
        SELECT NEW.id, t.event_type
        FROM t
        WHERE t.event_type IS NOT NULL;
	RETURN NEW;
END;
$$;


CREATE FUNCTION public.procrastinate_unlink_periodic_defers_v1() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE procrastinate_periodic_defers
    SET job_id = NULL
    WHERE job_id = OLD.id;
    RETURN OLD;
END;
$$;


CREATE FUNCTION public.procrastinate_unregister_worker_v1(worker_id bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM procrastinate_workers
    WHERE id = worker_id;
END;
$$;


CREATE FUNCTION public.procrastinate_update_heartbeat_v1(worker_id bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE procrastinate_workers
    SET last_heartbeat = NOW()
    WHERE id = worker_id;
END;
$$;


-- procrastinate_events

CREATE TABLE public.procrastinate_events (
    id bigint NOT NULL,
    job_id bigint NOT NULL,
    type public.procrastinate_job_event_type,
    at timestamp with time zone DEFAULT now()
);

CREATE SEQUENCE public.procrastinate_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.procrastinate_events_id_seq OWNED BY public.procrastinate_events.id;

ALTER TABLE ONLY public.procrastinate_events ALTER COLUMN id SET DEFAULT nextval('public.procrastinate_events_id_seq'::regclass);

ALTER TABLE ONLY public.procrastinate_events
    ADD CONSTRAINT procrastinate_events_pkey PRIMARY KEY (id);

CREATE INDEX procrastinate_events_job_id_fkey_v1 ON public.procrastinate_events USING btree (job_id);

ALTER TABLE ONLY public.procrastinate_events
    ADD CONSTRAINT procrastinate_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.procrastinate_jobs(id) ON DELETE CASCADE;


-- procrastinate_jobs

CREATE TABLE public.procrastinate_jobs (
    id bigint NOT NULL,
    queue_name character varying(128) NOT NULL,
    task_name character varying(128) NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    lock text,
    queueing_lock text,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    status public.procrastinate_job_status DEFAULT 'todo'::public.procrastinate_job_status NOT NULL,
    scheduled_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    abort_requested boolean DEFAULT false NOT NULL,
    worker_id bigint,
    CONSTRAINT check_not_todo_abort_requested CHECK ((NOT ((status = 'todo'::public.procrastinate_job_status) AND (abort_requested = true))))
);

CREATE SEQUENCE public.procrastinate_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.procrastinate_jobs_id_seq OWNED BY public.procrastinate_jobs.id;

ALTER TABLE ONLY public.procrastinate_jobs ALTER COLUMN id SET DEFAULT nextval('public.procrastinate_jobs_id_seq'::regclass);

ALTER TABLE ONLY public.procrastinate_jobs
    ADD CONSTRAINT procrastinate_jobs_pkey PRIMARY KEY (id);

CREATE INDEX idx_procrastinate_jobs_worker_not_null ON public.procrastinate_jobs USING btree (worker_id) WHERE ((worker_id IS NOT NULL) AND (status = 'doing'::public.procrastinate_job_status));

CREATE INDEX procrastinate_jobs_id_lock_idx_v1 ON public.procrastinate_jobs USING btree (id, lock) WHERE (status = ANY (ARRAY['todo'::public.procrastinate_job_status, 'doing'::public.procrastinate_job_status]));

CREATE UNIQUE INDEX procrastinate_jobs_lock_idx_v1 ON public.procrastinate_jobs USING btree (lock) WHERE (status = 'doing'::public.procrastinate_job_status);

CREATE INDEX procrastinate_jobs_priority_idx_v1 ON public.procrastinate_jobs USING btree (priority DESC, id) WHERE (status = 'todo'::public.procrastinate_job_status);

CREATE INDEX procrastinate_jobs_queue_name_idx_v1 ON public.procrastinate_jobs USING btree (queue_name);

CREATE UNIQUE INDEX procrastinate_jobs_queueing_lock_idx_v1 ON public.procrastinate_jobs USING btree (queueing_lock) WHERE (status = 'todo'::public.procrastinate_job_status);

CREATE TRIGGER procrastinate_jobs_notify_queue_job_aborted_v1 AFTER UPDATE OF abort_requested ON public.procrastinate_jobs FOR EACH ROW WHEN (((old.abort_requested = false) AND (new.abort_requested = true) AND (new.status = 'doing'::public.procrastinate_job_status))) EXECUTE FUNCTION public.procrastinate_notify_queue_abort_job_v1();

CREATE TRIGGER procrastinate_jobs_notify_queue_job_inserted_v1 AFTER INSERT ON public.procrastinate_jobs FOR EACH ROW WHEN ((new.status = 'todo'::public.procrastinate_job_status)) EXECUTE FUNCTION public.procrastinate_notify_queue_job_inserted_v1();

CREATE TRIGGER procrastinate_trigger_abort_requested_events_v1 AFTER UPDATE OF abort_requested ON public.procrastinate_jobs FOR EACH ROW WHEN ((new.abort_requested = true)) EXECUTE FUNCTION public.procrastinate_trigger_abort_requested_events_procedure_v1();

CREATE TRIGGER procrastinate_trigger_delete_jobs_v1 BEFORE DELETE ON public.procrastinate_jobs FOR EACH ROW EXECUTE FUNCTION public.procrastinate_unlink_periodic_defers_v1();

CREATE TRIGGER procrastinate_trigger_scheduled_events_v1 AFTER INSERT OR UPDATE ON public.procrastinate_jobs FOR EACH ROW WHEN (((new.scheduled_at IS NOT NULL) AND (new.status = 'todo'::public.procrastinate_job_status))) EXECUTE FUNCTION public.procrastinate_trigger_function_scheduled_events_v1();

CREATE TRIGGER procrastinate_trigger_status_events_insert_v1 AFTER INSERT ON public.procrastinate_jobs FOR EACH ROW WHEN ((new.status = 'todo'::public.procrastinate_job_status)) EXECUTE FUNCTION public.procrastinate_trigger_function_status_events_insert_v1();

CREATE TRIGGER procrastinate_trigger_status_events_update_v1 AFTER UPDATE OF status ON public.procrastinate_jobs FOR EACH ROW EXECUTE FUNCTION public.procrastinate_trigger_function_status_events_update_v1();

ALTER TABLE ONLY public.procrastinate_jobs
    ADD CONSTRAINT procrastinate_jobs_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.procrastinate_workers(id) ON DELETE SET NULL;


-- procrastinate_periodic_defers

CREATE TABLE public.procrastinate_periodic_defers (
    id bigint NOT NULL,
    task_name character varying(128) NOT NULL,
    defer_timestamp bigint,
    job_id bigint,
    periodic_id character varying(128) DEFAULT ''::character varying NOT NULL
);

CREATE SEQUENCE public.procrastinate_periodic_defers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.procrastinate_periodic_defers_id_seq OWNED BY public.procrastinate_periodic_defers.id;

ALTER TABLE ONLY public.procrastinate_periodic_defers ALTER COLUMN id SET DEFAULT nextval('public.procrastinate_periodic_defers_id_seq'::regclass);

ALTER TABLE ONLY public.procrastinate_periodic_defers
    ADD CONSTRAINT procrastinate_periodic_defers_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.procrastinate_periodic_defers
    ADD CONSTRAINT procrastinate_periodic_defers_unique UNIQUE (task_name, periodic_id, defer_timestamp);

CREATE INDEX procrastinate_periodic_defers_job_id_fkey_v1 ON public.procrastinate_periodic_defers USING btree (job_id);

ALTER TABLE ONLY public.procrastinate_periodic_defers
    ADD CONSTRAINT procrastinate_periodic_defers_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.procrastinate_jobs(id);


-- procrastinate_workers

CREATE TABLE public.procrastinate_workers (
    id bigint NOT NULL,
    last_heartbeat timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE public.procrastinate_workers ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.procrastinate_workers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.procrastinate_workers
    ADD CONSTRAINT procrastinate_workers_pkey PRIMARY KEY (id);

CREATE INDEX idx_procrastinate_workers_last_heartbeat ON public.procrastinate_workers USING btree (last_heartbeat);
