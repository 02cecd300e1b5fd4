-- Which judge grades an experiment's rubrics, so two experiments judged differently can be
-- told apart.
--
-- judge_by: 'sdk' when the SDK's process grades them (run_experiment had a judge, given or
-- the server's default, when it created the experiment; the server's scoring then skips its
-- own judge), 'server' when the server's scoring graded them, null while no judge has.
-- judge: 'provider/model' (an LLM provider of the server) or 'sdk:model' (a Judge given to
-- run_experiment); judge_model, judge_base_url and judge_prompt_hash say exactly which.
ALTER TABLE experiments
    ADD COLUMN judge_by          text,
    ADD COLUMN judge             text,
    ADD COLUMN judge_model       text,
    ADD COLUMN judge_base_url    text,
    ADD COLUMN judge_prompt_hash text,
    ADD CONSTRAINT experiments_judge_by_check CHECK (judge_by IN ('server', 'sdk')),
    ADD CONSTRAINT experiments_judge_named_check CHECK ((judge_by IS NULL) = (judge IS NULL));
