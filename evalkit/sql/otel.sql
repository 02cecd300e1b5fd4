-- Spans, sessions and the trace -> session map (the OTLP collector's tables).
-- A batch's span ids come in as one bytea of concatenated ids (16 bytes a trace id, 8 a span
-- id), its per-trace and per-session values as one JSON array of objects: one statement per
-- batch, not per span. (Array parameters are escaped element by element on the client, in
-- Python, which costs more than the statement; JSON is encoded in C.)

-- name: span_partition_create :one
-- Create the spans partition of one UTC day if it is missing.
SELECT evalkit_spans_partition_create(%(day)s::date) AS created;

-- name: span_partition_drop_before :many
-- Drop the spans partitions of days before the cutoff; their names.
SELECT evalkit_spans_partition_drop_before(%(cutoff)s::date) AS dropped;

-- name: trace_claim_many :many
-- Create or lock a batch's traces (%(traces)s: each trace of the batch with the session its
-- root span names when the root is here, and its spans' times): one row per trace, with its
-- state, the session it belongs to (the one it has, else its root's; a new trace is created
-- with it) and that session's size as last committed (read, not locked). root_now marks a
-- trace that was waiting for its root; earlier marks one an earlier batch created (its
-- first_received_at is not this batch's), the only traces where a span of the batch can
-- already be stored (span_find_stored, run after this statement: a batch that waited here
-- for a concurrent one's lock on a trace sees what that one stored). Traces are locked in
-- key order and sessions after, by the caller, so concurrent batches never deadlock. A
-- trace's times and last_received_at are final here (its times are returned only for a
-- trace that was without its root: the caller reads no other's); its session and pending
-- counts are written back after the size cap (trace_session_write_many). waiting marks a
-- trace whose session a run of the agent waits on (state collecting: it gets a settle job).
-- The agent is held first (as agent_hold does): no row at all when it was deleted, nor when
-- %(token_id)s (an agent token the edge took from memory, not null) was revoked since.
WITH agent AS (
    SELECT a.id FROM agents a
    WHERE a.id = %(agent_id)s
      AND (%(token_id)s::bigint IS NULL OR EXISTS (
          SELECT 1 FROM agent_tokens t
          WHERE t.id = %(token_id)s AND t.agent_id = a.id AND t.revoked_at IS NULL
      ))
    FOR KEY SHARE OF a
),
batch AS (
    SELECT decode(b.trace_id, 'hex') AS trace_id, b.session_id, b.first_span_at,
           b.last_span_at
    FROM json_to_recordset(%(traces)s::json) AS b (
        trace_id text, session_id text, first_span_at timestamptz, last_span_at timestamptz
    )
),
traces AS (
    INSERT INTO trace_sessions AS t (agent_id, trace_id, session_id, first_span_at,
                                     last_span_at, first_received_at, last_received_at)
    SELECT a.id, b.trace_id, b.session_id, b.first_span_at, b.last_span_at,
           %(received_at)s, %(received_at)s
    FROM agent a CROSS JOIN batch b
    ORDER BY b.trace_id
    ON CONFLICT (agent_id, trace_id) DO UPDATE SET
        first_span_at = least(t.first_span_at, EXCLUDED.first_span_at),
        last_span_at = greatest(t.last_span_at, EXCLUDED.last_span_at),
        last_received_at = EXCLUDED.last_received_at,
        orphan = false
    RETURNING t.trace_id, t.session_id, t.pending_spans, t.pending_bytes, t.first_span_at,
              t.last_span_at, t.first_received_at
)
SELECT t.trace_id, coalesce(t.session_id, b.session_id) AS session_id,
       t.session_id IS NULL AND b.session_id IS NOT NULL AS root_now,
       t.pending_spans, t.pending_bytes,
       CASE WHEN t.session_id IS NULL THEN t.first_span_at END AS first_span_at,
       CASE WHEN t.session_id IS NULL THEN t.last_span_at END AS last_span_at,
       t.first_received_at <> %(received_at)s AS earlier,
       (SELECT s.bytes FROM sessions s
        WHERE s.agent_id = %(agent_id)s
          AND s.session_id = coalesce(t.session_id, b.session_id)) AS session_bytes,
       EXISTS (
           SELECT 1 FROM runs r
           WHERE r.agent_id = %(agent_id)s
             AND r.session_id = coalesce(t.session_id, b.session_id)
             AND r.state = 'collecting'
       ) AS waiting
FROM traces t
JOIN batch b ON b.trace_id = t.trace_id;

-- name: span_find_stored :many
-- Which of these spans (ids packed, of traces an earlier batch created) are stored already:
-- a retried export, or spans sent twice. One row per trace with any, their span ids packed.
SELECT s.trace_id, string_agg(s.span_id, ''::bytea) AS span_ids
FROM (
    SELECT substring(%(trace_ids)s::bytea FROM i * 16 + 1 FOR 16) AS trace_id,
           substring(%(span_ids)s::bytea FROM i * 8 + 1 FOR 8) AS span_id
    FROM generate_series(0, length(%(span_ids)s::bytea) / 8 - 1) AS i
) AS k
JOIN spans s ON s.agent_id = %(agent_id)s AND s.trace_id = k.trace_id AND s.span_id = k.span_id
GROUP BY s.trace_id;

-- name: session_lock_many :many
-- Sessions a batch may take to the size cap, created when new and locked in key order (after
-- the batch's traces), with their size: the spans that would pass the cap are refused.
INSERT INTO sessions AS s (agent_id, session_id)
SELECT %(agent_id)s, id FROM json_array_elements_text(%(session_ids)s::json) AS id ORDER BY id
ON CONFLICT (agent_id, session_id) DO UPDATE SET agent_id = s.agent_id
RETURNING s.session_id, s.bytes;

-- name: span_copy :exec
-- Binary COPY of a batch's new spans (routed to the partition of received_at).
COPY spans (received_at, agent_id, trace_id, span_id, parent_span_id, name, kind, start_ns,
            end_ns, status_code, status_message, scope, body, resource, size)
FROM STDIN (FORMAT BINARY);

-- name: span_list_for_session :many
-- Every stored span of a session (the spans of its traces), by start time then span id.
SELECT s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start_ns, s.end_ns,
       s.status_code, s.status_message, s.scope, s.body, s.resource
FROM trace_sessions t
JOIN spans s ON s.agent_id = t.agent_id AND s.trace_id = t.trace_id
WHERE t.agent_id = %(agent_id)s AND t.session_id = %(session_id)s
ORDER BY s.start_ns, s.span_id;

-- name: span_list_for_trace :many
-- Every stored span of one trace, by start time then span id.
SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code,
       status_message, scope, body, resource
FROM spans
WHERE agent_id = %(agent_id)s AND trace_id = %(trace_id)s
ORDER BY start_ns, span_id;

-- name: trace_session_list_waiting_root :many
-- Traces still waiting for their root span that received nothing since the cutoff and that
-- the orphan job has not looked at since their last span: oldest first.
SELECT agent_id, trace_id
FROM trace_sessions
WHERE session_id IS NULL AND NOT orphan AND last_received_at < %(before)s
ORDER BY last_received_at
LIMIT %(limit)s;

-- name: trace_session_lock_waiting_root :one
-- One trace still waiting for its root and quiet since the cutoff, locked (no batch adds to
-- it until the caller commits), with when its first span arrived; nothing when its root or
-- another span came meanwhile.
SELECT t.pending_spans, t.pending_bytes, t.first_span_at, t.last_span_at, t.last_received_at,
       t.first_received_at
FROM trace_sessions t
WHERE t.agent_id = %(agent_id)s AND t.trace_id = %(trace_id)s AND t.session_id IS NULL
  AND NOT t.orphan AND t.last_received_at < %(before)s
FOR UPDATE OF t;

-- name: trace_session_assign_orphan :one
-- Give a locked trace whose root never came the session one of its spans names: its held
-- spans join the session (created when new; marked truncated when they take it over
-- otel.max_session_bytes, as when a late root brings them); whether a run of the agent waits
-- on that session (state collecting). Sessions are locked after traces, as in ingest.
WITH trace AS (
    UPDATE trace_sessions
    SET session_id = %(session_id)s, pending_spans = 0, pending_bytes = 0, orphan = false
    WHERE agent_id = %(agent_id)s AND trace_id = %(trace_id)s
),
session AS (
    INSERT INTO sessions AS s (agent_id, session_id, span_count, bytes, truncated,
                               first_span_at, last_span_at, first_received_at,
                               last_received_at)
    VALUES (%(agent_id)s, %(session_id)s, %(spans)s, %(bytes)s,
            %(bytes)s > %(max_session_bytes)s, %(first_span_at)s, %(last_span_at)s,
            %(first_received_at)s, %(last_received_at)s)
    ON CONFLICT (agent_id, session_id) DO UPDATE SET
        span_count = s.span_count + EXCLUDED.span_count,
        bytes = s.bytes + EXCLUDED.bytes,
        truncated = s.truncated OR (EXCLUDED.bytes > 0
                                    AND s.bytes + EXCLUDED.bytes > %(max_session_bytes)s),
        first_span_at = least(s.first_span_at, EXCLUDED.first_span_at),
        last_span_at = greatest(s.last_span_at, EXCLUDED.last_span_at),
        first_received_at = least(s.first_received_at, EXCLUDED.first_received_at),
        last_received_at = greatest(s.last_received_at, EXCLUDED.last_received_at)
)
SELECT EXISTS (
    SELECT 1 FROM runs
    WHERE agent_id = %(agent_id)s AND session_id = %(session_id)s AND state = 'collecting'
) AS waiting;

-- name: trace_session_mark_orphan :exec
-- Mark a locked trace whose root never came, and none of whose spans names a session, as an
-- orphan: it stays without a session (a late root still gives it one).
UPDATE trace_sessions SET orphan = true
WHERE agent_id = %(agent_id)s AND trace_id = %(trace_id)s;

-- name: trace_session_get_orphan :one
-- An orphan trace, shaped as a session row whose id is the trace id (hex).
SELECT t.agent_id, encode(t.trace_id, 'hex') AS session_id, NULL::bigint AS run_id,
       t.first_span_at, t.last_span_at,
       t.first_received_at,
       t.last_received_at, t.pending_spans AS span_count, t.pending_bytes AS bytes,
       0 AS rejected_spans, false AS truncated, true AS unassigned,
       a.name AS agent, w.name AS workspace
FROM trace_sessions t
JOIN agents a ON a.id = t.agent_id
JOIN workspaces w ON w.id = a.workspace_id
WHERE t.agent_id = %(agent_id)s AND t.trace_id = %(trace_id)s AND t.session_id IS NULL
  AND t.orphan;

-- name: trace_session_delete_before :exec
-- Forget traces that received nothing since the cutoff (their spans are gone).
DELETE FROM trace_sessions WHERE last_received_at < %(cutoff)s;

-- name: session_get :one
-- One session with its agent's name and workspace.
SELECT s.*, a.name AS agent, w.name AS workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
WHERE s.agent_id = %(agent_id)s AND s.session_id = %(session_id)s;

-- name: session_list :many
-- Sessions, and orphan traces (shaped as sessions whose id is the trace id, unassigned),
-- most recently active first; of one agent when agent_id is given.
SELECT x.*, a.name AS agent, w.name AS workspace
FROM (
    SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
           s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
           s.truncated, false AS unassigned
    FROM sessions s
    WHERE (%(agent_id)s::bigint IS NULL OR s.agent_id = %(agent_id)s)
    UNION ALL
    SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL, t.first_span_at, t.last_span_at,
           t.first_received_at,
           t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
    FROM trace_sessions t
    WHERE t.session_id IS NULL AND t.orphan
      AND (%(agent_id)s::bigint IS NULL OR t.agent_id = %(agent_id)s)
) AS x
JOIN agents a ON a.id = x.agent_id
JOIN workspaces w ON w.id = a.workspace_id
ORDER BY x.last_received_at DESC, x.session_id
LIMIT %(limit)s;

-- name: session_list_by_id :many
-- The sessions of every agent whose id is this one (a session id is unique per agent only),
-- and the orphan traces whose trace id it is (%(trace_id)s: NULL when the id is not 32 hex
-- digits), by workspace then agent, a session before an orphan trace. Each agent is looked
-- up through the primary keys, so the cost grows with the agents, not with their sessions.
SELECT x.*, a.name AS agent, w.name AS workspace
FROM agents a
JOIN workspaces w ON w.id = a.workspace_id
CROSS JOIN LATERAL (
    SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
           s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
           s.truncated, false AS unassigned
    FROM sessions s
    WHERE s.agent_id = a.id AND s.session_id = %(session_id)s
    UNION ALL
    SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL::bigint, t.first_span_at,
           t.last_span_at,
           t.first_received_at,
           t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
    FROM trace_sessions t
    WHERE t.agent_id = a.id AND t.trace_id = %(trace_id)s::bytea AND t.session_id IS NULL
      AND t.orphan
) AS x
ORDER BY w.name, a.name, x.unassigned;

-- name: session_delete_before :exec
-- Forget sessions that received nothing since the cutoff (their spans are gone).
DELETE FROM sessions WHERE last_received_at < %(cutoff)s;

-- name: trace_session_write_many :one
-- Write a batch back in one statement: the traces whose session or pending counts changed
-- (the root came, or it is still waiting for it) and the batch's sessions, created when new
-- (in key order), with the spans, bytes and refusals added and the times widened; each row
-- found through its primary key (upserts, so the cost does not grow with the agent's stored
-- traces and sessions). A session now over %(max_session_bytes)s that the batch did not lock
-- (not in %(locked)s) was taken there by a concurrent batch: the statement fails
-- (evalkit_session_over_cap, constraint sessions_size_cap), so that it can go with the
-- COMMIT. Times are RFC 3339 text.
WITH traces AS (
    INSERT INTO trace_sessions AS t (agent_id, trace_id, session_id, pending_spans,
                                     pending_bytes)
    SELECT %(agent_id)s, decode(u.trace_id, 'hex'), u.session_id, u.pending_spans,
           u.pending_bytes
    FROM json_to_recordset(%(traces)s::json) AS u (
        trace_id text, session_id text, pending_spans integer, pending_bytes bigint
    )
    ON CONFLICT (agent_id, trace_id) DO UPDATE SET
        session_id = EXCLUDED.session_id,
        pending_spans = EXCLUDED.pending_spans,
        pending_bytes = EXCLUDED.pending_bytes
),
sessions AS (
    INSERT INTO sessions AS s (agent_id, session_id, span_count, bytes, rejected_spans,
                               truncated, first_span_at, last_span_at, first_received_at,
                               last_received_at)
    SELECT %(agent_id)s, u.session_id, u.spans, u.bytes, u.rejected, u.truncated,
           u.first_span_at, u.last_span_at, %(received_at)s, %(received_at)s
    FROM json_to_recordset(%(sessions)s::json) AS u (
        session_id text, spans integer, bytes bigint, rejected integer, truncated boolean,
        first_span_at timestamptz, last_span_at timestamptz
    )
    ORDER BY u.session_id
    ON CONFLICT (agent_id, session_id) DO UPDATE SET
        span_count = s.span_count + EXCLUDED.span_count,
        bytes = s.bytes + EXCLUDED.bytes,
        rejected_spans = s.rejected_spans + EXCLUDED.rejected_spans,
        truncated = s.truncated OR EXCLUDED.truncated,
        first_span_at = least(s.first_span_at, EXCLUDED.first_span_at),
        last_span_at = greatest(s.last_span_at, EXCLUDED.last_span_at),
        last_received_at = EXCLUDED.last_received_at
    RETURNING s.session_id, s.bytes
)
SELECT count(*) AS over_cap
FROM sessions s
WHERE CASE WHEN s.bytes > %(max_session_bytes)s AND s.session_id <> ALL(%(locked)s::text[])
           THEN evalkit_session_over_cap(%(agent_id)s, s.session_id)
      END;
