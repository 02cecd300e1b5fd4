-- Judge alignment (`evalkit judge align`): a proposal of few-shot examples for one judge
-- score, chosen from an experiment's human labels, tried in a trial scoring round of its own
-- (numbered below zero, so it is never the experiment's current round nor carried
-- forward); and the examples a workspace accepted, which its judge then shows.
CREATE TABLE judge_proposals (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    experiment_id bigint NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    name text NOT NULL,
    examples jsonb NOT NULL,
    prompt_hash text NOT NULL,
    base_hash text NOT NULL,
    trial_round integer NOT NULL CHECK (trial_round < 0),
    runs integer NOT NULL,
    before jsonb NOT NULL,
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    accepted_by bigint REFERENCES users (id) ON DELETE SET NULL,
    accepted_at timestamptz,
    CONSTRAINT judge_proposals_new_prompt CHECK (prompt_hash <> base_hash),
    UNIQUE (experiment_id, trial_round)
);

CREATE TABLE judge_examples (
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name text NOT NULL,
    examples jsonb NOT NULL,
    prompt_hash text NOT NULL,
    proposal_id bigint REFERENCES judge_proposals (id) ON DELETE SET NULL,
    accepted_by bigint REFERENCES users (id) ON DELETE SET NULL,
    accepted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, name)
);
