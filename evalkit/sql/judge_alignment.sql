-- name: alignment_candidates_list :many
-- The experiment's runs with a value of one judge score in its current round and a human
-- label of it: what `evalkit judge align` picks few-shot examples from. Each labeller
-- counts once, with their latest label; every comment given is kept.
SELECT r.id AS run_id, r.case_id, r.answer, r.output, v.content, tv.content AS target_content,
       s.value AS scored,
       ARRAY(SELECT DISTINCT ON (x.user_id) x.value FROM labels x
             WHERE x.run_id = r.id AND x.name = s.name
             ORDER BY x.user_id, x.id DESC) AS labelled,
       ARRAY(SELECT x.comment FROM labels x
             WHERE x.run_id = r.id AND x.name = s.name AND x.comment IS NOT NULL
             ORDER BY x.id) AS comments
FROM runs r
JOIN experiments e ON e.id = r.experiment_id
JOIN scores s ON s.run_id = r.id AND s.round = e.scoring_round AND s.name = %(name)s
              AND s.value IS NOT NULL
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
WHERE r.experiment_id = %(experiment_id)s
  AND EXISTS (SELECT 1 FROM labels x WHERE x.run_id = r.id AND x.name = s.name)
ORDER BY r.id;

-- name: judge_examples_get :one
-- The few-shot examples the experiment's workspace accepted for one judge score, if any.
SELECT j.examples, j.prompt_hash, j.proposal_id
FROM experiments e
JOIN judge_examples j ON j.workspace_id = e.workspace_id AND j.name = %(name)s
WHERE e.id = %(experiment_id)s;

-- name: judge_examples_upsert :one
-- Accept a proposal: its examples become the ones the workspace's judge shows for the score,
-- only while the examples in use are still those it was made on (%(base_hash)s); no row
-- comes back when another proposal was accepted in between.
INSERT INTO judge_examples (workspace_id, name, examples, prompt_hash, proposal_id, accepted_by)
VALUES (%(workspace_id)s, %(name)s, %(examples)s::jsonb, %(prompt_hash)s, %(proposal_id)s,
        %(accepted_by)s)
ON CONFLICT (workspace_id, name) DO UPDATE
SET examples = EXCLUDED.examples, prompt_hash = EXCLUDED.prompt_hash,
    proposal_id = EXCLUDED.proposal_id, accepted_by = EXCLUDED.accepted_by,
    accepted_at = now()
WHERE judge_examples.prompt_hash = %(base_hash)s
RETURNING workspace_id;

-- name: judge_proposal_insert :one
-- A proposal, with the experiment's next trial round (-1, -2, ...: below every real round).
INSERT INTO judge_proposals (experiment_id, name, examples, prompt_hash, base_hash,
                             trial_round, runs, before, created_by)
SELECT %(experiment_id)s, %(name)s, %(examples)s::jsonb, %(prompt_hash)s, %(base_hash)s,
       COALESCE(min(p.trial_round), 0) - 1, %(runs)s, %(before)s::jsonb, %(created_by)s
FROM judge_proposals p
WHERE p.experiment_id = %(experiment_id)s
RETURNING id, trial_round;

-- name: judge_proposal_get :one
-- One proposal, with its experiment's workspace and who made and accepted it.
SELECT p.id, p.experiment_id, e.workspace_id, w.name AS workspace, p.name, p.examples,
       p.prompt_hash, p.base_hash, p.trial_round, p.runs, p.before,
       c.username AS created_by, p.created_at, a.username AS accepted_by, p.accepted_at
FROM judge_proposals p
JOIN experiments e ON e.id = p.experiment_id
JOIN workspaces w ON w.id = e.workspace_id
LEFT JOIN users c ON c.id = p.created_by
LEFT JOIN users a ON a.id = p.accepted_by
WHERE p.id = %(id)s;

-- name: judge_proposal_examples_for_round :one
-- The examples a trial round grades with: those of the proposal it tries.
SELECT examples FROM judge_proposals
WHERE experiment_id = %(experiment_id)s AND trial_round = %(round)s AND name = %(name)s;

-- name: judge_proposal_accept :one
-- Mark a proposal accepted (once).
UPDATE judge_proposals SET accepted_by = %(accepted_by)s, accepted_at = now()
WHERE id = %(id)s AND accepted_at IS NULL
RETURNING accepted_at;
