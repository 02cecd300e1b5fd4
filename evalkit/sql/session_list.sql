-- Trace sessions across agents for the web UI's Traces page and GET /api/trace-sessions.

-- name: session_list_page :many
-- Sessions most recently active first, filtered by workspace, agent and session id (each
-- optional), one page of them, with the run that claimed each and that run's experiment,
-- case and dataset.
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
WHERE (%(workspace_id)s::bigint IS NULL OR a.workspace_id = %(workspace_id)s)
  AND (%(agent_id)s::bigint IS NULL OR s.agent_id = %(agent_id)s)
  AND (%(session_id)s::text IS NULL OR s.session_id = %(session_id)s)
ORDER BY s.last_received_at DESC, s.agent_id, s.session_id
LIMIT %(limit)s OFFSET %(offset)s;
