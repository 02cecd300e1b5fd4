-- A worker whose run freed a slot claims the agent's next queued run and reads what the
-- state machine needs for it. Those were two round trips a run; this function is one.
--
-- run_work_view is what the machine reads for a run: the run_work query and the function
-- both read it, so the two cannot disagree about a column.
CREATE VIEW run_work_view AS
SELECT r.id AS run_id, r.experiment_id, r.agent_id, r.state, r.attempts, r.case_id,
       r.repetition, r.harness_run_id, r.harness_status, r.session_id, r.timed_out,
       r.started_at, r.harness_done_at,
       r.deadline_at, r.stop_requested_at,
       e.model, e.capabilities, e.driver, e.created_by AS experiment_created_by,
       a.harness_url, a.api_key, a.trajectory_source, a.run_timeout_seconds,
       a.poll_interval_seconds, a.stop_grace_seconds, a.trajectory_wait_seconds,
       v.content, v.fixtures, tv.content AS target_content, tv.fixtures AS target_fixtures
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN agents a ON a.id = r.agent_id
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id;

-- The claim and the read are two statements of the function: the read takes a snapshot of
-- its own, so it sees the claimed runs in starting (one statement holding both would see
-- them as they were before the claim).
CREATE FUNCTION evalkit_claim_work(p_agent_id bigint, p_limit integer, p_actor text)
RETURNS SETOF run_work_view
LANGUAGE plpgsql
AS $$
DECLARE
    claimed bigint[];
BEGIN
    claimed := ARRAY(SELECT evalkit_claim_runs(p_agent_id, p_limit, p_actor));
    -- ARRAY(SELECT unnest(...)) for the plan cache, as in the run_work query: a plan that
    -- cannot see the ids is kept, where one that can is made again on every call.
    RETURN QUERY SELECT * FROM run_work_view
    WHERE run_id = ANY(ARRAY(SELECT unnest(claimed))) ORDER BY run_id;
END;
$$;
