-- Trace sessions across agents for the web UI's Traces page and GET /api/trace-sessions.
-- Each row: a session (or an orphan trace: its root span never came and none of its spans
-- names a session, listed by its trace id as `traces list` does), its agent and workspace,
-- and the run that claimed it with that run's experiment, case and dataset. One statement
-- per filter, so each walks its own index; each branch stops at offset + limit rows
-- (upto) before the page is cut from the merged, ordered rows.

-- name: session_list_page :many
-- One page of every agent's sessions and orphan traces, most recently active first.
SELECT x.*, a.name AS agent, w.name AS workspace,
       r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM (
    (SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
            s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
            s.truncated, false AS unassigned
     FROM sessions s
     ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
     LIMIT %(upto)s)
    UNION ALL
    (SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL::bigint, t.first_span_at, t.last_span_at,
            t.first_received_at,
            t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
     FROM trace_sessions t
     WHERE t.session_id IS NULL AND t.orphan
     ORDER BY t.last_received_at DESC
     LIMIT %(upto)s)
) AS x
JOIN agents a ON a.id = x.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = x.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
ORDER BY x.last_received_at DESC, x.agent_id, x.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_page_by_workspace :many
-- One page of the sessions and orphan traces of a workspace's agents, most recently active first.
SELECT x.*, a.name AS agent, w.name AS workspace,
       r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM (
    (SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
            s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
            s.truncated, false AS unassigned
     FROM sessions s
     WHERE s.agent_id IN (SELECT id FROM agents WHERE workspace_id = %(workspace_id)s)
     ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
     LIMIT %(upto)s)
    UNION ALL
    (SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL::bigint, t.first_span_at, t.last_span_at,
            t.first_received_at,
            t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
     FROM trace_sessions t
     WHERE t.session_id IS NULL AND t.orphan
       AND t.agent_id IN (SELECT id FROM agents WHERE workspace_id = %(workspace_id)s)
     ORDER BY t.last_received_at DESC
     LIMIT %(upto)s)
) AS x
JOIN agents a ON a.id = x.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = x.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
ORDER BY x.last_received_at DESC, x.agent_id, x.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_page_by_agent :many
-- One page of an agent's sessions and orphan traces, most recently active first.
SELECT x.*, a.name AS agent, w.name AS workspace,
       r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM (
    (SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
            s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
            s.truncated, false AS unassigned
     FROM sessions s
     WHERE s.agent_id = %(agent_id)s
     ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
     LIMIT %(upto)s)
    UNION ALL
    (SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL::bigint, t.first_span_at, t.last_span_at,
            t.first_received_at,
            t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
     FROM trace_sessions t
     WHERE t.session_id IS NULL AND t.orphan AND t.agent_id = %(agent_id)s
     ORDER BY t.last_received_at DESC
     LIMIT %(upto)s)
) AS x
JOIN agents a ON a.id = x.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = x.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
ORDER BY x.last_received_at DESC, x.agent_id, x.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_one :many
-- One session of an agent, or the orphan trace whose id (hex) it is: at most one row.
SELECT x.*, a.name AS agent, w.name AS workspace,
       r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM (
    SELECT s.agent_id, s.session_id, s.run_id, s.first_span_at, s.last_span_at,
           s.first_received_at, s.last_received_at, s.span_count, s.bytes, s.rejected_spans,
           s.truncated, false AS unassigned
    FROM sessions s
    WHERE s.agent_id = %(agent_id)s AND s.session_id = %(session_id)s
    UNION ALL
    SELECT t.agent_id, encode(t.trace_id, 'hex'), NULL::bigint, t.first_span_at, t.last_span_at,
           t.first_received_at,
           t.last_received_at, t.pending_spans, t.pending_bytes, 0, false, true
    FROM trace_sessions t
    WHERE t.session_id IS NULL AND t.orphan AND t.agent_id = %(agent_id)s
      AND encode(t.trace_id, 'hex') = %(session_id)s
) AS x
JOIN agents a ON a.id = x.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = x.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
ORDER BY x.unassigned
LIMIT 1;
