-- A batch's write-back refuses, itself, a session that a concurrent batch took over its size
-- cap meanwhile.
--
-- A batch locks a session before its COPY only when the batch could take it over the cap as
-- last committed; a session it did not lock can still be taken over by a concurrent batch.
-- The write-back (trace_session_write_many) finds that and raises this error, and the edge
-- counts the batch again with every session locked. Raised in the statement, not read back
-- by the edge, so the write-back and the COMMIT go to the database together (the COMMIT
-- fails with it): one round trip a batch.
CREATE FUNCTION evalkit_session_over_cap(agent_id bigint, session_id text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'session % of agent % went over its size cap under a concurrent batch',
        session_id, agent_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'sessions_size_cap',
              HINT = 'count the batch again with its sessions locked (evalkit.store.otel.OverCap)';
END;
$$;
