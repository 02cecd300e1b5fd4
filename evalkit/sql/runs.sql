-- name: experiment_case_pins :many
-- The current version of every case of a dataset (removed ones included, the caller skips
-- them), and for overlays the current version of the case they patch; both through
-- cases.current_version.
SELECT c.case_id, v.id AS version_id, v.removed, v.content, v.overlay_target,
       tv.id AS target_version_id, tv.content AS target_content
FROM cases c
JOIN case_versions v ON v.case_pk = c.id AND v.version = c.current_version
LEFT JOIN cases tc
       ON v.overlay_target IS NOT NULL
      AND tc.workspace_id = %(workspace_id)s AND tc.case_id = v.overlay_target
LEFT JOIN case_versions tv ON tv.case_pk = tc.id AND tv.version = tc.current_version
WHERE c.dataset_id = %(dataset_id)s
ORDER BY c.case_id;

-- name: experiment_insert :one
-- A new experiment (its runs are inserted by runs_insert in the same transaction).
INSERT INTO experiments (workspace_id, dataset_id, agent_id, driver, repetitions, model,
                         split, case_ids, capabilities, created_by, judge_by, judge,
                         judge_model, judge_base_url, judge_prompt_hash)
VALUES (%(workspace_id)s, %(dataset_id)s, %(agent_id)s, %(driver)s, %(repetitions)s,
        %(model)s, %(split)s, %(case_ids)s, %(capabilities)s::jsonb, %(created_by)s,
        %(judge_by)s, %(judge)s, %(judge_model)s, %(judge_base_url)s, %(judge_prompt_hash)s)
RETURNING id;

-- name: scoring_round_first :exec
-- Round 1 of a new experiment: the scores its runs get as they finish.
INSERT INTO scoring_rounds (experiment_id, round, created_by)
VALUES (%(experiment_id)s, 1, %(created_by)s)
ON CONFLICT DO NOTHING;

-- name: runs_insert :exec
-- One run per pinned case version and repetition; first repetitions first.
INSERT INTO runs (experiment_id, agent_id, case_version_id, target_version_id, case_id,
                  repetition)
SELECT %(experiment_id)s, %(agent_id)s, pin.version_id, pin.target_version_id, pin.case_id, rep
FROM unnest(%(version_ids)s::bigint[], %(target_version_ids)s::bigint[],
            %(case_ids)s::text[]) AS pin (version_id, target_version_id, case_id)
CROSS JOIN generate_series(1, %(repetitions)s) AS rep
ORDER BY rep, pin.case_id;

-- name: experiment_get :one
-- One experiment with the names of its workspace, dataset and agent.
SELECT e.id, e.workspace_id, w.name AS workspace, w.kind AS workspace_kind,
       w.owner_id AS workspace_owner_id,
       d.name AS dataset, dw.name AS dataset_workspace,
       a.id AS agent_id, a.name AS agent, aw.name AS agent_workspace,
       a.trajectory_source, e.driver, e.status, e.repetitions, e.model, e.split, e.case_ids, e.capabilities,
       e.created_at, e.created_by, u.username AS created_by_name, e.finished_at, e.summary,
       e.judge_by, e.judge, e.judge_model, e.judge_base_url, e.judge_prompt_hash
FROM experiments e
JOIN workspaces w ON w.id = e.workspace_id
JOIN datasets d ON d.id = e.dataset_id
JOIN workspaces dw ON dw.id = d.workspace_id
JOIN agents a ON a.id = e.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
LEFT JOIN users u ON u.id = e.created_by
WHERE e.id = %(experiment_id)s;

-- name: experiment_list :many
-- Newest first; one workspace when workspace_id is set, else all.
SELECT e.id, w.name AS workspace, d.name AS dataset, dw.name AS dataset_workspace,
       a.name AS agent, aw.name AS agent_workspace, e.driver, e.status, e.repetitions,
       e.model, e.split, e.case_ids, e.created_at, u.username AS created_by_name,
       e.finished_at, e.summary, e.judge_by, e.judge, e.judge_model, e.judge_base_url,
       e.judge_prompt_hash,
       (SELECT COALESCE(jsonb_object_agg(c.state, c.n), '{}')
        FROM (SELECT state, count(*) AS n FROM runs r
              WHERE r.experiment_id = e.id GROUP BY state) c) AS by_state
FROM experiments e
JOIN workspaces w ON w.id = e.workspace_id
JOIN datasets d ON d.id = e.dataset_id
JOIN workspaces dw ON dw.id = d.workspace_id
JOIN agents a ON a.id = e.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
LEFT JOIN users u ON u.id = e.created_by
WHERE (%(workspace_id)s::bigint IS NULL OR e.workspace_id = %(workspace_id)s)
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: experiment_state_counts :many
-- How many runs of an experiment are in each state.
SELECT state, count(*) AS n FROM runs WHERE experiment_id = %(experiment_id)s GROUP BY state;

-- name: experiment_runs :many
-- Every run of an experiment, with its trajectory's verdict.
SELECT r.id, r.case_id, r.repetition, r.state, r.harness_run_id, r.harness_status,
       r.error, r.timed_out, r.attempts, r.created_at, r.started_at, r.harness_done_at,
       r.finished_at, t.valid AS trajectory_valid, t.partial AS trajectory_partial
FROM runs r
LEFT JOIN trajectories t ON t.run_id = r.id
WHERE r.experiment_id = %(experiment_id)s
ORDER BY r.id;

-- name: experiment_finish_if_done :one
-- Close the experiment once no run is live; the summary is counted here, in one statement.
UPDATE experiments e
SET status = 'finished', finished_at = now(),
    summary = (
        SELECT jsonb_build_object(
            'runs', sum(s.n),
            'by_state', jsonb_object_agg(s.state, s.n),
            'timed_out', sum(s.timed_out),
            'seconds', extract(epoch FROM now() - e.created_at)
        )
        FROM (SELECT state, count(*) AS n, count(*) FILTER (WHERE timed_out) AS timed_out
              FROM runs WHERE experiment_id = e.id GROUP BY state) s
    )
WHERE e.id = %(experiment_id)s AND e.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM runs r
                  WHERE r.experiment_id = e.id AND r.state NOT IN ('done', 'failed', 'errored'))
RETURNING e.id;

-- name: experiment_judge_get :one
-- Whether the SDK's process grades an experiment's rubrics (the server's scoring skips them).
SELECT judge_by FROM experiments WHERE id = %(experiment_id)s;

-- name: experiment_judge_record :exec
-- The server's judge graded a rubric of the experiment: record which one (the last one that
-- graded, so a new scoring round with another default judge shows it). Writes nothing when
-- it is already recorded, or when the SDK's process grades the experiment.
UPDATE experiments
SET judge_by = 'server', judge = %(judge)s, judge_model = %(judge_model)s,
    judge_base_url = %(judge_base_url)s, judge_prompt_hash = %(judge_prompt_hash)s
WHERE id = %(experiment_id)s AND judge_by IS DISTINCT FROM 'sdk'
  AND (judge_by IS NULL OR judge IS DISTINCT FROM %(judge)s
       OR judge_model IS DISTINCT FROM %(judge_model)s
       OR judge_base_url IS DISTINCT FROM %(judge_base_url)s
       OR judge_prompt_hash IS DISTINCT FROM %(judge_prompt_hash)s);

-- name: experiment_reopen :exec
-- A resumed experiment with live runs is running again.
UPDATE experiments SET status = 'running', finished_at = NULL, summary = NULL
WHERE id = %(experiment_id)s
  AND EXISTS (SELECT 1 FROM runs r
              WHERE r.experiment_id = %(experiment_id)s
                AND r.state NOT IN ('done', 'failed', 'errored'));

-- name: run_work :many
-- Everything the state machine needs for these runs.
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
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
-- The ids through a sub-select: a plan that cannot see how many there are is the same for every
-- call, so PostgreSQL keeps one generic plan instead of planning this join on each call.
WHERE r.id = ANY(ARRAY(SELECT unnest(%(run_ids)s::bigint[])))
ORDER BY r.id;

-- name: run_live_ids :many
-- The runs of an experiment that are not terminal yet.
SELECT id, state FROM runs
WHERE experiment_id = %(experiment_id)s AND state NOT IN ('done', 'failed', 'errored')
ORDER BY id;

-- name: run_transition :one
-- Compare-and-set: applies only if the run is still in from_state with from_attempts, so
-- a step replayed after a crash, or by a second driver, changes nothing. One step, or a
-- chain of consecutive steps of the run (their fields merged by the caller,
-- evalkit.store.runs.write_chains): the row is updated once, to where the last step leads,
-- and each step is logged in run_events (the arrays, in order). When source is set, the
-- same statement stores the collected trajectory.
WITH moved AS (
    UPDATE runs SET
        state = %(to_state)s,
        attempts = %(attempts)s,
        harness_run_id = COALESCE(%(harness_run_id)s, harness_run_id),
        harness_status = COALESCE(%(harness_status)s, harness_status),
        session_id = COALESCE(%(session_id)s, session_id),
        answer = COALESCE(%(answer)s, answer),
        output = COALESCE(%(output)s::jsonb, output),
        error = COALESCE(%(error)s, error),
        timed_out = timed_out OR %(timed_out)s,
        started_at = COALESCE(started_at, %(started_at)s),
        deadline_at = COALESCE(deadline_at, %(deadline_at)s),
        stop_requested_at = COALESCE(stop_requested_at, %(stop_requested_at)s),
        harness_done_at = COALESCE(harness_done_at, %(harness_done_at)s),
        finished_at = CASE WHEN %(to_state)s IN ('done', 'failed', 'errored') THEN now() END,
        updated_at = now()
    WHERE id = %(run_id)s AND state = %(from_state)s AND attempts = %(from_attempts)s
    RETURNING id
), logged AS (
    INSERT INTO run_events (run_id, actor, from_state, to_state, attempts, why)
    SELECT moved.id, %(actor)s::text, step.from_state, step.to_state, step.attempts, step.why
    FROM moved, unnest(%(step_from)s::text[], %(step_to)s::text[], %(step_attempts)s::int[],
                       %(step_why)s::text[]) WITH ORDINALITY
         AS step (from_state, to_state, attempts, why, n)
    ORDER BY step.n
), stored AS (
    INSERT INTO trajectories (run_id, source, body, raw, partial, valid, errors)
    SELECT id, %(source)s::text, %(body)s::jsonb, %(raw)s::text, %(partial)s::boolean,
           %(valid)s::boolean, %(errors)s::jsonb
    FROM moved
    WHERE %(source)s::text IS NOT NULL
    ON CONFLICT (run_id) DO NOTHING
)
SELECT id FROM moved;

-- name: runs_claim :many
-- Move up to `limit` queued server-driven runs of an agent to starting, never past the
-- agent's max_concurrent_runs in flight, logging each step (the machine's claim, taken for
-- many runs in one statement; see evalkit/sql/schema/0018_claim_in_one_statement.sql).
SELECT id FROM evalkit_claim_runs(%(agent_id)s, %(limit)s, %(actor)s) AS id;

-- name: agents_with_queued_runs :many
-- Agents that have server-driven runs waiting (the periodic dispatcher's sweep).
SELECT DISTINCT r.agent_id
FROM runs r JOIN experiments e ON e.id = r.experiment_id
WHERE r.state = 'queued' AND e.driver = 'server';

-- name: run_get :one
-- One run with its trajectory and the experiment facts the access rules need.
SELECT r.id, r.experiment_id, r.case_id, r.repetition, r.state, r.harness_run_id,
       r.harness_status, r.session_id, r.answer, r.output, r.error, r.timed_out, r.attempts,
       r.created_at, r.started_at, r.deadline_at, r.stop_requested_at, r.harness_done_at,
       r.finished_at, v.version AS case_version,
       t.source AS trajectory_source, t.body AS trajectory, t.partial AS trajectory_partial,
       t.valid AS trajectory_valid, t.errors AS trajectory_errors,
       e.workspace_id, e.driver, e.created_by AS experiment_created_by
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN trajectories t ON t.run_id = r.id
WHERE r.id = %(run_id)s;

-- name: run_collecting_for_session :one
-- The run of an agent waiting in collecting for the trajectory of a traced session.
SELECT r.id AS run_id, r.experiment_id, r.agent_id, r.state, r.attempts, r.timed_out,
       r.harness_status, r.harness_done_at, e.driver, a.name AS agent_name,
       a.trajectory_source, a.trajectory_wait_seconds
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN agents a ON a.id = r.agent_id
WHERE r.agent_id = %(agent_id)s AND r.session_id = %(session_id)s AND r.state = 'collecting'
ORDER BY r.id DESC
LIMIT 1;

-- name: runs_orphaned :many
-- Live server-driven runs idle for a while, with the queueing locks of the jobs that move
-- them: orphans (a worker died between claiming a run and queueing its step) when no job
-- waits or runs under those (evalkit.jobs.procrastinate_adapter.without_live_jobs).
-- Candidates, not orphans: most of them have their job, hence the high cap.
SELECT r.id, r.agent_id, r.state, r.session_id, a.trajectory_source,
       ARRAY['run:' || r.id, 'settle:' || r.agent_id || ':' || r.session_id] AS locks
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN agents a ON a.id = r.agent_id
WHERE e.driver = 'server'
  AND r.state IN ('starting', 'running', 'stopping', 'collecting', 'scoring')
  AND r.updated_at < now() - make_interval(secs => %(idle_seconds)s)
ORDER BY r.id
LIMIT 10000;

-- name: experiments_without_live_runs :many
-- Open experiments whose runs are all over (a crash lost the step that closes them).
SELECT e.id FROM experiments e
WHERE e.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM runs r
                  WHERE r.experiment_id = e.id AND r.state NOT IN ('done', 'failed', 'errored'))
LIMIT 1000;

-- name: session_link_run :exec
-- Record which run a traced session belongs to (its trajectory was built for it).
UPDATE sessions SET run_id = %(run_id)s
WHERE agent_id = %(agent_id)s AND session_id = %(session_id)s
  AND run_id IS DISTINCT FROM %(run_id)s;

-- name: run_events_list :many
-- A run's recorded transitions, oldest first.
SELECT at, actor, from_state, to_state, attempts, why
FROM run_events WHERE run_id = %(run_id)s ORDER BY id;

-- name: run_position :one
-- Where a run is now (state, attempts and session), to build a step from it.
SELECT id AS run_id, experiment_id, state, attempts, session_id FROM runs
WHERE id = %(run_id)s;
