-- Trace sessions across agents for the web UI's Traces page and GET /api/trace-sessions.
-- Each row: the session, its agent and workspace, and the run that claimed it with that run's
-- experiment, case and dataset. One statement per filter, so each uses its own index
-- (sessions_last_received_idx, sessions_agent_last_received_idx, the primary key).

-- name: session_list_page :many
-- One page of every agent's sessions, most recently active first.
SELECT s.session_id, s.span_count, s.bytes, s.rejected_spans, s.truncated,
       s.first_span_at, s.last_span_at, s.first_received_at, s.last_received_at,
       a.name AS agent, w.name AS workspace,
       r.id AS run_id, r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_page_by_workspace :many
-- One page of the sessions of a workspace's agents, most recently active first.
SELECT s.session_id, s.span_count, s.bytes, s.rejected_spans, s.truncated,
       s.first_span_at, s.last_span_at, s.first_received_at, s.last_received_at,
       a.name AS agent, w.name AS workspace,
       r.id AS run_id, r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
WHERE a.workspace_id = %(workspace_id)s
ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_page_by_agent :many
-- One page of an agent's sessions, most recently active first.
SELECT s.session_id, s.span_count, s.bytes, s.rejected_spans, s.truncated,
       s.first_span_at, s.last_span_at, s.first_received_at, s.last_received_at,
       a.name AS agent, w.name AS workspace,
       r.id AS run_id, r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
WHERE s.agent_id = %(agent_id)s
ORDER BY s.last_received_at DESC, s.session_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: session_list_one :many
-- One session of an agent, as a page of at most one row.
SELECT s.session_id, s.span_count, s.bytes, s.rejected_spans, s.truncated,
       s.first_span_at, s.last_span_at, s.first_received_at, s.last_received_at,
       a.name AS agent, w.name AS workspace,
       r.id AS run_id, r.state AS run_state, r.experiment_id, r.case_id, r.repetition,
       d.name AS dataset, dw.name AS dataset_workspace
FROM sessions s
JOIN agents a ON a.id = s.agent_id
JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN experiments e ON e.id = r.experiment_id
LEFT JOIN datasets d ON d.id = e.dataset_id
LEFT JOIN workspaces dw ON dw.id = d.workspace_id
WHERE s.agent_id = %(agent_id)s AND s.session_id = %(session_id)s;
