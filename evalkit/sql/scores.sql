-- name: score_context_list :many
-- Everything an evaluator sees of each run among run_ids: the run, its case version (and the
-- version its overlay patches), its trajectory, the experiment's capabilities and current
-- round, whether the SDK's process grades its rubrics, the agent's own provides; and which
-- evaluators already stored scores in the round asked for (null: the current one). A valid
-- trajectory is cast to json, which Conn.all_decoding_json hands to the caller's decoder as
-- the text received (decoded into the ATIF Structs).
SELECT r.id AS run_id, r.experiment_id, r.case_id, r.repetition, r.state, r.harness_status,
       r.timed_out, r.answer, r.output, r.started_at,
       COALESCE(r.harness_done_at, r.finished_at) AS finished_at,
       e.model, e.capabilities, e.scoring_round, e.driver,
       e.judge_by IS NOT DISTINCT FROM 'sdk' AS judged_by_sdk,
       COALESCE(%(round)s::integer, e.scoring_round) AS round,
       ARRAY(SELECT DISTINCT s.evaluator FROM scores s
             WHERE s.run_id = r.id
               AND s.round = COALESCE(%(round)s::integer, e.scoring_round)) AS stored,
       a.workspace_id AS agent_workspace_id, a.provides AS agent_provides,
       v.content, tv.content AS target_content,
       CASE WHEN t.valid THEN t.body::json END AS trajectory, t.valid AS trajectory_valid
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN agents a ON a.id = r.agent_id
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
LEFT JOIN trajectories t ON t.run_id = r.id
-- The ids through a sub-select: a plan that cannot see how many there are is the same for every
-- call, so PostgreSQL keeps one generic plan instead of planning this join on each call.
WHERE r.id = ANY(ARRAY(SELECT unnest(%(run_ids)s::bigint[])))
ORDER BY r.id;

-- name: scores_insert :exec
-- Scores of runs in one round (run_ids gives each score's run); a name already stored for
-- the run and round is kept as it was.
INSERT INTO scores (run_id, round, name, value, kind, explanation, error, skipped, evaluator,
                    evaluator_version, judge_model, prompt_hash, raw)
SELECT s.run_id, %(round)s, s.name, s.value, s.kind, s.explanation, s.error, s.skipped,
       s.evaluator, s.evaluator_version, s.judge_model, s.prompt_hash, s.raw::jsonb
FROM unnest(%(run_ids)s::bigint[], %(names)s::text[], %(values)s::float8[],
            %(kinds)s::text[], %(explanations)s::text[], %(errors)s::text[],
            %(skipped)s::text[], %(evaluators)s::text[], %(versions)s::text[],
            %(judge_models)s::text[], %(prompt_hashes)s::text[], %(raws)s::text[])
     AS s (run_id, name, value, kind, explanation, error, skipped, evaluator,
           evaluator_version, judge_model, prompt_hash, raw)
ON CONFLICT (run_id, round, name) DO NOTHING;

-- name: scores_list_by_run :many
-- Every score of a run, newest round first, then by name.
SELECT round, name, value, kind, explanation, error, skipped, evaluator, evaluator_version,
       judge_model, prompt_hash, raw, created_at
FROM scores
WHERE run_id = %(run_id)s AND (%(round)s::integer IS NULL OR round = %(round)s)
ORDER BY round DESC, name;

-- name: experiment_round_next :one
-- Open the next scoring round of an experiment (atomic: two callers get two rounds).
UPDATE experiments SET scoring_round = scoring_round + 1
WHERE id = %(experiment_id)s
RETURNING scoring_round;

-- name: scoring_round_insert :exec
-- Record who opened a round and which evaluators it runs (null: every one the cases select).
INSERT INTO scoring_rounds (experiment_id, round, evaluators, created_by)
VALUES (%(experiment_id)s, %(round)s, %(evaluators)s, %(created_by)s);

-- name: scores_carry_forward :exec
-- Copy into a new round, unchanged, the previous round's scores of the evaluators the new
-- round does not re-run (so every round holds a complete set).
INSERT INTO scores (run_id, round, name, value, kind, explanation, error, skipped, evaluator,
                    evaluator_version, judge_model, prompt_hash, raw, created_at)
SELECT s.run_id, %(round)s, s.name, s.value, s.kind, s.explanation, s.error, s.skipped,
       s.evaluator, s.evaluator_version, s.judge_model, s.prompt_hash, s.raw, s.created_at
FROM scores s
JOIN runs r ON r.id = s.run_id
WHERE r.experiment_id = %(experiment_id)s AND s.round = %(round)s - 1
  AND NOT s.evaluator = ANY(%(rerun)s::text[])
  AND NOT (%(rerun_custom)s AND starts_with(s.evaluator, 'remote:'))
ON CONFLICT (run_id, round, name) DO NOTHING;

-- name: runs_scorable :many
-- The runs of an experiment a new round scores: those that reached scoring (an errored run
-- never had an answer to score).
SELECT id FROM runs
WHERE experiment_id = %(experiment_id)s AND state IN ('done', 'failed')
ORDER BY id;

-- name: experiment_python_evaluators :many
-- The Python evaluators (scores stored as python:<name>) that scored any run of an
-- experiment in any round: only the script that holds them can run them again.
SELECT DISTINCT substr(s.evaluator, 8) AS name
FROM runs r
JOIN scores s ON s.run_id = r.id
WHERE r.experiment_id = %(experiment_id)s AND starts_with(s.evaluator, 'python:')
ORDER BY 1;

-- name: scoring_rounds_list :many
-- Every round of an experiment, newest first, with its scores counted (its scoring jobs are
-- counted by evalkit.jobs.procrastinate_adapter.jobs_per_round).
WITH exp AS (
    SELECT id, scoring_round FROM experiments WHERE id = %(experiment_id)s
), counted AS (
    SELECT s.round, count(DISTINCT s.run_id) AS runs_scored, count(*) AS scores,
           count(*) FILTER (WHERE s.error IS NOT NULL) AS errors,
           count(*) FILTER (WHERE s.skipped IS NOT NULL) AS skipped
    FROM scores s
    JOIN runs r ON r.id = s.run_id
    WHERE r.experiment_id = %(experiment_id)s
    GROUP BY s.round
)
SELECT g.round, sr.evaluators, sr.created_at, u.username AS created_by,
       COALESCE(c.runs_scored, 0) AS runs_scored, COALESCE(c.scores, 0) AS scores,
       COALESCE(c.errors, 0) AS errors, COALESCE(c.skipped, 0) AS skipped
FROM exp
CROSS JOIN LATERAL generate_series(1, exp.scoring_round) AS g (round)
LEFT JOIN scoring_rounds sr ON sr.experiment_id = exp.id AND sr.round = g.round
LEFT JOIN users u ON u.id = sr.created_by
LEFT JOIN counted c ON c.round = g.round
ORDER BY g.round DESC;

-- name: scores_totals_by_round :many
-- Per score name in each round of an experiment: how many runs, the mean value (checks) or
-- the mean measurement (gauges) of the runs that did not fail (a failed run is not judged),
-- and how many were skipped or errors.
SELECT s.round, s.name, s.kind, count(*) AS runs,
       avg(s.value) FILTER (WHERE r.state <> 'failed') AS mean,
       avg((s.raw #>> '{}')::float8)
           FILTER (WHERE jsonb_typeof(s.raw) = 'number' AND r.state <> 'failed') AS raw_mean,
       count(*) FILTER (WHERE s.skipped IS NOT NULL) AS skipped,
       count(*) FILTER (WHERE s.error IS NOT NULL) AS errors
FROM scores s
JOIN runs r ON r.id = s.run_id
WHERE r.experiment_id = %(experiment_id)s
GROUP BY s.round, s.name, s.kind
ORDER BY s.round DESC, s.name;

-- name: run_scoring_round_get :one
-- Whether a run exists, and its experiment's current scoring round.
SELECT r.id, r.experiment_id, e.scoring_round
FROM runs r JOIN experiments e ON e.id = r.experiment_id
WHERE r.id = %(run_id)s;
