-- Schedules: experiments the server starts on a cron timer.

-- A schedule fires as its creator (created_by), into the workspace where the creator's
-- experiment of that dataset and agent would live (workspace_id). next_fire_at is the next
-- cron slot (UTC) after last_fire_at; a worker claims a slot by compare-and-set on it, so
-- each slot starts at most one experiment however many workers tick. latest_experiment_id
-- is the experiment the last successful fire started; last_error says why the last fire
-- started none (NULL when it started one).
CREATE TABLE schedules (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id         bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name                 text NOT NULL,
    dataset_id           bigint NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    agent_id             bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    cron                 text NOT NULL,
    split                text,
    case_ids             text[],
    repetitions          integer NOT NULL DEFAULT 1,
    model                text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    created_by           bigint REFERENCES users (id) ON DELETE SET NULL,
    next_fire_at         timestamptz NOT NULL,
    last_fire_at         timestamptz,
    fires                integer NOT NULL DEFAULT 0,
    latest_experiment_id bigint REFERENCES experiments (id) ON DELETE SET NULL,
    last_error           text,
    CONSTRAINT schedules_workspace_name_key UNIQUE (workspace_id, name),
    CONSTRAINT schedules_name_format CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT schedules_repetitions_check CHECK (repetitions BETWEEN 1 AND 100),
    CONSTRAINT schedules_fire_order_check CHECK (last_fire_at IS NULL OR last_fire_at < next_fire_at)
);
-- The tick's question, once a minute: which schedules are due?
CREATE INDEX schedules_due_idx ON schedules (next_fire_at);
