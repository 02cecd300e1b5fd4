-- Spans, span keys, sessions and the trace -> session map (the OTLP collector's tables).
-- A batch's ids come in as one bytea of concatenated ids (16 bytes a trace id, 8 a span id),
-- other columns as parallel arrays: one statement per batch, not per span. (A bytea[]
-- parameter would be escaped element by element on the client, which costs more than the
-- statement.)

-- name: span_partition_create :one
-- Create the spans partition of one UTC day if it is missing.
SELECT evalkit_spans_partition_create(%(day)s::date) AS created;

-- name: span_partition_drop_before :many
-- Drop the spans partitions of days before the cutoff; their names.
SELECT evalkit_spans_partition_drop_before(%(cutoff)s::date) AS dropped;

-- name: span_partition_list :many
-- The spans partitions that exist, oldest first.
SELECT c.relname AS name
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'spans'::regclass
ORDER BY c.relname;

-- name: span_key_insert_many :one
-- Claim the keys of a batch's spans; how many were new (the rest are a retried export).
WITH claimed AS (
    INSERT INTO span_keys (agent_id, trace_id, span_id, received_at)
    SELECT %(agent_id)s, k.trace_id, k.span_id, %(received_at)s
    FROM (
        SELECT substring(%(trace_ids)s::bytea FROM i * 16 + 1 FOR 16) AS trace_id,
               substring(%(span_ids)s::bytea FROM i * 8 + 1 FOR 8) AS span_id
        FROM generate_series(0, length(%(span_ids)s::bytea) / 8 - 1) AS i
    ) AS k
    ORDER BY k.trace_id, k.span_id
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) AS claimed FROM claimed;

-- name: span_key_list_claimed :many
-- Which of a batch's keys it claimed itself (stamped with its received_at): asked only when
-- some were not new. The batch holds its traces' locks, so no other batch stamped these.
SELECT trace_id, span_id FROM span_keys
WHERE agent_id = %(agent_id)s AND received_at = %(received_at)s
  AND trace_id IN (
      SELECT substring(%(trace_ids)s::bytea FROM i * 16 + 1 FOR 16)
      FROM generate_series(0, length(%(trace_ids)s::bytea) / 16 - 1) AS i
  );

-- name: span_key_delete_many :exec
-- Give back the keys of spans that were refused after all (over the session's size cap).
DELETE FROM span_keys k
USING (
    SELECT substring(%(trace_ids)s::bytea FROM i * 16 + 1 FOR 16) AS trace_id,
           substring(%(span_ids)s::bytea FROM i * 8 + 1 FOR 8) AS span_id
    FROM generate_series(0, length(%(span_ids)s::bytea) / 8 - 1) AS i
) AS d
WHERE k.agent_id = %(agent_id)s AND k.trace_id = d.trace_id AND k.span_id = d.span_id;

-- name: span_copy :exec
-- Binary COPY of a batch's new spans (routed to the partition of received_at).
COPY spans (received_at, agent_id, trace_id, span_id, parent_span_id, name, kind, start_ns,
            end_ns, status_code, status_message, scope, body, resource, size)
FROM STDIN (FORMAT BINARY);

-- name: span_key_delete_before :exec
-- Forget the keys of spans whose partition was dropped.
DELETE FROM span_keys WHERE received_at < %(cutoff)s;

-- name: span_list_for_session :many
-- Every stored span of a session (the spans of its traces), by start time then span id.
SELECT s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start_ns, s.end_ns,
       s.status_code, s.status_message, s.scope, s.body, s.resource
FROM trace_sessions t
JOIN spans s ON s.agent_id = t.agent_id AND s.trace_id = t.trace_id
WHERE t.agent_id = %(agent_id)s AND t.session_id = %(session_id)s
ORDER BY s.start_ns, s.span_id;

-- name: trace_session_lock_many :many
-- Each trace of a batch, created when new, locked (in key order, so concurrent batches never
-- deadlock) and returned as it stands: session (NULL until its root arrives) and what is
-- pending. The no-op DO UPDATE is what locks and returns an existing row in one statement.
INSERT INTO trace_sessions AS t (agent_id, trace_id)
SELECT %(agent_id)s, substring(%(trace_ids)s::bytea FROM i * 16 + 1 FOR 16) AS trace_id
FROM generate_series(0, length(%(trace_ids)s::bytea) / 16 - 1) AS i
ORDER BY trace_id
ON CONFLICT (agent_id, trace_id) DO UPDATE SET agent_id = t.agent_id
RETURNING t.trace_id, t.session_id, t.pending_spans, t.pending_bytes, t.first_span_at,
          t.last_span_at;

-- name: trace_session_delete_before :exec
-- Forget traces that received nothing since the cutoff (their spans are gone).
DELETE FROM trace_sessions WHERE last_received_at < %(cutoff)s;

-- name: session_lock_many :many
-- The sessions a batch touches, created when new, locked in key order, with their size.
INSERT INTO sessions AS s (agent_id, session_id)
SELECT %(agent_id)s, id FROM unnest(%(session_ids)s::text[]) AS id ORDER BY id
ON CONFLICT (agent_id, session_id) DO UPDATE SET agent_id = s.agent_id
RETURNING s.session_id, s.bytes, s.truncated;

-- name: session_get :one
-- One session with its agent's name and workspace.
SELECT s.*, a.name AS agent, w.name AS workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
WHERE s.agent_id = %(agent_id)s AND s.session_id = %(session_id)s;

-- name: session_list :many
-- Sessions, most recently active first; of one agent when agent_id is given.
SELECT s.*, a.name AS agent, w.name AS workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
WHERE (%(agent_id)s::bigint IS NULL OR s.agent_id = %(agent_id)s)
ORDER BY s.last_received_at DESC, s.session_id
LIMIT %(limit)s;

-- name: session_delete_before :exec
-- Forget sessions that received nothing since the cutoff (their spans are gone).
DELETE FROM sessions WHERE last_received_at < %(cutoff)s;

-- name: settle_job_list_waiting :many
-- Which of these settle locks already have a job waiting (procrastinate's todo jobs).
SELECT queueing_lock FROM procrastinate_jobs
WHERE status = 'todo' AND queueing_lock = ANY(%(locks)s::text[]);

-- name: session_update_batch :many
-- Write back a batch in one statement: its traces (session once known, what is still
-- pending), its sessions (spans, bytes, refusals, times), and return the sessions that a
-- run of the agent waits on (state collecting), which get a settle job. (Both UPDATEs run
-- in full whether or not the SELECT reads them.)
WITH traces AS (
    UPDATE trace_sessions t
    SET session_id = u.session_id,
        pending_spans = u.pending_spans,
        pending_bytes = u.pending_bytes,
        first_span_at = u.first_span_at,
        last_span_at = u.last_span_at,
        last_received_at = %(received_at)s
    FROM (
        SELECT substring(%(trace_ids)s::bytea FROM (n * 16 - 15)::integer FOR 16) AS trace_id,
               session_id, pending_spans, pending_bytes, first_span_at, last_span_at
        FROM unnest(
            %(t_session_ids)s::text[], %(t_pending_spans)s::integer[],
            %(t_pending_bytes)s::bigint[], %(t_first_span_at)s::timestamptz[],
            %(t_last_span_at)s::timestamptz[]
        ) WITH ORDINALITY AS v (session_id, pending_spans, pending_bytes, first_span_at,
                                last_span_at, n)
    ) AS u
    WHERE t.agent_id = %(agent_id)s AND t.trace_id = u.trace_id
),
sessions AS (
    UPDATE sessions s
    SET span_count = s.span_count + u.spans,
        bytes = s.bytes + u.bytes,
        rejected_spans = s.rejected_spans + u.rejected,
        truncated = s.truncated OR u.truncated,
        first_span_at = CASE
            WHEN s.first_span_at IS NULL THEN u.first_span_at
            WHEN u.first_span_at IS NULL THEN s.first_span_at
            ELSE least(s.first_span_at, u.first_span_at) END,
        last_span_at = CASE
            WHEN s.last_span_at IS NULL THEN u.last_span_at
            WHEN u.last_span_at IS NULL THEN s.last_span_at
            ELSE greatest(s.last_span_at, u.last_span_at) END,
        last_received_at = %(received_at)s
    FROM unnest(
        %(session_ids)s::text[], %(spans)s::integer[], %(bytes)s::bigint[],
        %(rejected)s::integer[], %(truncated)s::boolean[],
        %(first_span_at)s::timestamptz[], %(last_span_at)s::timestamptz[]
    ) AS u (session_id, spans, bytes, rejected, truncated, first_span_at, last_span_at)
    WHERE s.agent_id = %(agent_id)s AND s.session_id = u.session_id
)
SELECT DISTINCT r.session_id
FROM runs r
WHERE r.agent_id = %(agent_id)s AND r.session_id = ANY(%(session_ids)s::text[])
  AND r.state = 'collecting';
