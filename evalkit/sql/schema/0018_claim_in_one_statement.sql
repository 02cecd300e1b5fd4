-- An agent's queued runs are claimed by one statement. The claim locks the agent row so
-- that concurrent claims count each other's runs; taken by a statement of its own, that
-- lock was held across the client's next round trips, and a worker whose event loop was
-- busy with other runs held it for milliseconds: claims queued on it at about 100 a
-- second. Inside this function the lock is held only while the database claims.
--
-- Each statement of a (volatile) PL/pgSQL function takes a new snapshot, so the claim
-- sees every run a claim that held the lock before it committed.
--
-- The claim's transaction commits without waiting for its WAL to reach the disk: the lock
-- is released at commit, and under load claims queued behind each other's WAL flush
-- (sampled: more waits on the flush than on anything else). Losing a claim to a crash of
-- the database loses nothing: the run is queued again, and its harness start carries the
-- run's id as its idempotency key. Any later commit that waits for its WAL (the run's next
-- step) makes the claim durable too, as the WAL is written in order.
CREATE FUNCTION evalkit_claim_runs(p_agent_id bigint, p_limit integer, p_actor text)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM agents WHERE id = p_agent_id FOR UPDATE;
    RETURN QUERY
    WITH claimed AS (
        UPDATE runs SET state = 'starting', updated_at = now()
        WHERE id IN (
            SELECT r.id
            FROM runs r
            JOIN experiments e ON e.id = r.experiment_id
            WHERE r.agent_id = p_agent_id AND r.state = 'queued' AND e.driver = 'server'
            ORDER BY r.id
            LIMIT GREATEST(0, LEAST(
                p_limit,
                (SELECT max_concurrent_runs FROM agents WHERE id = p_agent_id)
                - (SELECT count(*) FROM runs
                   WHERE agent_id = p_agent_id AND state IN ('starting', 'running', 'stopping'))
            ))
            FOR UPDATE OF r SKIP LOCKED
        )
        RETURNING runs.id
    ), logged AS (
        INSERT INTO run_events (run_id, actor, from_state, to_state, attempts, why)
        SELECT c.id, p_actor, 'queued', 'starting', 0, 'took a free slot of the agent'
        FROM claimed c
    )
    SELECT c.id FROM claimed c ORDER BY c.id;
END;
$$;
