-- Retried spans are found within their trace instead of in a table of every span's key.
-- span_keys cost an index insert a span (the largest part of a batch's database time);
-- a span can only repeat in a trace that an earlier batch carried, and those spans are
-- found through spans_agent_trace_idx. When a trace was first received, which span_keys
-- told for orphan traces, is kept on the trace.
ALTER TABLE trace_sessions ADD COLUMN first_received_at timestamptz;

UPDATE trace_sessions t
SET first_received_at = coalesce(
    (SELECT min(k.received_at) FROM span_keys k
     WHERE k.agent_id = t.agent_id AND k.trace_id = t.trace_id),
    t.last_received_at
);

ALTER TABLE trace_sessions ALTER COLUMN first_received_at SET DEFAULT now();
ALTER TABLE trace_sessions ALTER COLUMN first_received_at SET NOT NULL;

DROP TABLE span_keys;
