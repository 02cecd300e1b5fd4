-- name: sdk_experiment_cases :many
-- The pinned version of every case an experiment runs (with the version its overlay
-- patches), once per case: what the SDK's Python evaluators read.
SELECT DISTINCT ON (r.case_id)
       r.case_id, v.version, v.content, tv.content AS target_content
FROM runs r
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
WHERE r.experiment_id = %(experiment_id)s
ORDER BY r.case_id;

-- name: sdk_scores_upsert :many
-- Scores the SDK's process gave runs in one round (Python evaluators, or its judge; run_ids
-- gives each score's run). A name the run already has is kept, except the server's skip for
-- a remote evaluator it does not know (that name is the Python evaluator's): the new score
-- takes its place. Returns the runs and names written.
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
ON CONFLICT (run_id, round, name) DO UPDATE
SET value = excluded.value, kind = excluded.kind, explanation = excluded.explanation,
    error = excluded.error, skipped = excluded.skipped, evaluator = excluded.evaluator,
    evaluator_version = excluded.evaluator_version, judge_model = excluded.judge_model,
    prompt_hash = excluded.prompt_hash, raw = excluded.raw, created_at = now()
WHERE scores.skipped IS NOT NULL AND starts_with(scores.evaluator, 'remote:')
RETURNING run_id, name;

-- name: sdk_scores_carry_forward :exec
-- Copy into a new round the previous round's scores, but those of the Python evaluators
-- it re-runs and every non-Python score of the runs it re-scores on the server.
INSERT INTO scores (run_id, round, name, value, kind, explanation, error, skipped, evaluator,
                    evaluator_version, judge_model, prompt_hash, raw, created_at)
SELECT s.run_id, %(round)s, s.name, s.value, s.kind, s.explanation, s.error, s.skipped,
       s.evaluator, s.evaluator_version, s.judge_model, s.prompt_hash, s.raw, s.created_at
FROM scores s
JOIN runs r ON r.id = s.run_id
WHERE r.experiment_id = %(experiment_id)s AND s.round = %(round)s - 1
  AND NOT s.evaluator = ANY(%(rerun)s::text[])
  AND NOT (s.run_id = ANY(%(rescore_runs)s::bigint[])
           AND NOT starts_with(s.evaluator, 'python:'))
ON CONFLICT (run_id, round, name) DO NOTHING;

-- name: sdk_trajectory_replace :exec
-- A traced run's trajectory built again from its session's spans (evaluate_experiment).
INSERT INTO trajectories (run_id, source, body, raw, partial, valid, errors)
VALUES (%(run_id)s, %(source)s, %(body)s::jsonb, %(raw)s, %(partial)s, %(valid)s,
        %(errors)s::jsonb)
ON CONFLICT (run_id) DO UPDATE
SET source = excluded.source, body = excluded.body, raw = excluded.raw,
    partial = excluded.partial, valid = excluded.valid, errors = excluded.errors,
    created_at = now();

-- name: sdk_run_for_refetch :one
-- What reading a run's trajectory again needs: its session, agent, timing and the
-- trajectory it has now.
SELECT r.id, r.experiment_id, r.agent_id, r.session_id, r.timed_out, r.harness_status,
       a.name AS agent_name, t.body AS trajectory, t.valid, t.partial
FROM runs r
JOIN agents a ON a.id = r.agent_id
LEFT JOIN trajectories t ON t.run_id = r.id
WHERE r.id = %(run_id)s;

-- name: sdk_runs_of_experiment :many
-- The runs among run_ids that belong to an experiment, with their states.
SELECT id, state FROM runs
WHERE experiment_id = %(experiment_id)s AND id = ANY(%(run_ids)s::bigint[]);
