-- OpenTelemetry: agent tokens, spans (partitioned by the day they were received), the
-- keys that make a retried export idempotent, sessions and the trace -> session map.

-- A bearer token that sends spans for one agent. Only the SHA-256 digest is kept (like
-- login tokens); hint is the token's first characters, to tell tokens apart in a list.
-- Agent tokens never expire; they are revoked.
CREATE TABLE agent_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id     bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL,
    hint         text NOT NULL,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT agent_tokens_token_hash_key UNIQUE (token_hash)
);
CREATE INDEX agent_tokens_agent_idx ON agent_tokens (agent_id);

-- Spans as received. received_at is set by the server (never by the sender), so every
-- row falls in a partition that exists: today's, created ahead by a periodic job, by the
-- migration, or by the collector itself when missing. No DEFAULT partition (it would be
-- scanned by every new partition). Retention drops whole partitions.
-- No foreign keys: they would cost a lookup per row on the hot path; agent ids are never
-- reused, so spans of a deleted agent are unreachable and go with their partition.
-- body is the span as received, in its OTLP protobuf encoding (opentelemetry.proto.trace.v1
-- .Span: attributes, events, links and all), whatever the export's encoding was; resource
-- is its resource's encoding. Nothing is parsed or re-encoded on the way in (JSON columns
-- cost the collector a conversion per attribute and the server a parse per row); readers
-- decode them (evalkit.otel.otlp.span_from_row). The columns beside them are what the
-- server sorts and shows by. size is what the span counts against otel.max_session_bytes.
CREATE TABLE spans (
    received_at    timestamptz NOT NULL,
    agent_id       bigint NOT NULL,
    trace_id       bytea NOT NULL,
    span_id        bytea NOT NULL,
    parent_span_id bytea,
    name           text NOT NULL,
    kind           smallint NOT NULL,
    start_ns       bigint NOT NULL,
    end_ns         bigint NOT NULL,
    status_code    smallint NOT NULL,
    status_message text,
    scope          text,
    body           bytea NOT NULL,
    resource       bytea NOT NULL,
    size           integer NOT NULL
) PARTITION BY RANGE (received_at);
CREATE INDEX spans_agent_trace_idx ON spans (agent_id, trace_id);

-- One row per stored span, not partitioned, so a retried export (same spans, a later
-- received_at, maybe another day's partition) is recognised: the collector inserts the keys
-- first (ON CONFLICT DO NOTHING) and copies only the spans whose key was new. Old keys are
-- deleted with their partition's day.
CREATE TABLE span_keys (
    agent_id    bigint NOT NULL,
    trace_id    bytea NOT NULL,
    span_id     bytea NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (agent_id, trace_id, span_id)
);
-- BRIN: keys arrive in time order, so retention finds old ones at almost no write cost.
CREATE INDEX span_keys_received_at_idx ON span_keys USING brin (received_at);

-- A session: the spans of every trace whose root span carries the session id. run_id is
-- set when a run claims the session (the trajectory settle job).
CREATE TABLE sessions (
    agent_id          bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    session_id        text NOT NULL,
    run_id            bigint REFERENCES runs (id) ON DELETE SET NULL,
    first_span_at     timestamptz,
    last_span_at      timestamptz,
    first_received_at timestamptz NOT NULL DEFAULT now(),
    last_received_at  timestamptz NOT NULL DEFAULT now(),
    span_count        integer NOT NULL DEFAULT 0,
    bytes             bigint NOT NULL DEFAULT 0,
    rejected_spans    integer NOT NULL DEFAULT 0,
    truncated         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (agent_id, session_id)
);
CREATE INDEX sessions_last_received_idx ON sessions (last_received_at DESC);
CREATE INDEX sessions_agent_last_received_idx ON sessions (agent_id, last_received_at DESC);
CREATE INDEX sessions_run_idx ON sessions (run_id) WHERE run_id IS NOT NULL;

-- Which session a trace belongs to: its root span's. Until the root arrives session_id
-- is NULL and the trace's spans are counted here (pending_*); when the root comes they are
-- added to the session.
CREATE TABLE trace_sessions (
    agent_id         bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    trace_id         bytea NOT NULL,
    session_id       text,
    pending_spans    integer NOT NULL DEFAULT 0,
    pending_bytes    bigint NOT NULL DEFAULT 0,
    first_span_at    timestamptz,
    last_span_at     timestamptz,
    last_received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, trace_id)
);
CREATE INDEX trace_sessions_session_idx ON trace_sessions (agent_id, session_id);

-- The partition of spans for one UTC day, created if missing (true when it was created).
-- The gentle path: a plain table plus a matching CHECK, then ATTACH (SHARE UPDATE EXCLUSIVE
-- on spans, and the CHECK spares the validation scan), under an advisory lock so two
-- callers never race on the DDL.
CREATE FUNCTION evalkit_spans_partition_create(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
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

-- Drop the span partitions of days before ``cutoff`` (UTC); returns their names.
CREATE FUNCTION evalkit_spans_partition_drop_before(cutoff date) RETURNS SETOF text
LANGUAGE plpgsql AS $$
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
$$;

SELECT evalkit_spans_partition_create((now() AT TIME ZONE 'UTC')::date);
SELECT evalkit_spans_partition_create((now() AT TIME ZONE 'UTC')::date + 1);
