-- Traces whose root span never arrives. The collector holds a trace's spans under the trace
-- until its root comes; a periodic job gives a trace that stayed quiet for
-- otel.orphan_seconds without its root the session one of its spans names, or, when none
-- names one, marks it orphan: left without a session, listed as such by `traces list`.
-- Spans that arrive later for an orphan clear the mark (the job looks at it again).
ALTER TABLE trace_sessions ADD COLUMN orphan boolean NOT NULL DEFAULT false;

-- The traces without a session: those waiting for their root (orphan false, what the job
-- looks at) and the orphans (what `traces list` shows). Small next to the table, and none
-- of its columns changes when the collector writes a trace back, so those stay HOT updates.
CREATE INDEX trace_sessions_unassigned_idx ON trace_sessions (orphan, agent_id)
    WHERE session_id IS NULL;
