-- Run transitions guarded and logged in the database.
--
-- run_transitions_allowed is the state machine's table of allowed steps
-- (evalkit.runs.machine.ALLOWED; a test fails when the two differ). A trigger refuses any
-- change of a run's state or attempts that the table does not hold, whoever writes it.
CREATE TABLE run_transitions_allowed (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO run_transitions_allowed (from_state, to_state) VALUES
    ('queued', 'starting'), ('queued', 'errored'),
    ('starting', 'starting'), ('starting', 'running'), ('starting', 'collecting'),
    ('starting', 'errored'),
    ('running', 'running'), ('running', 'stopping'), ('running', 'collecting'),
    ('running', 'errored'),
    ('stopping', 'stopping'), ('stopping', 'collecting'), ('stopping', 'errored'),
    ('collecting', 'collecting'), ('collecting', 'scoring'), ('collecting', 'errored'),
    ('scoring', 'done'), ('scoring', 'failed'), ('scoring', 'errored');

CREATE FUNCTION runs_guard_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM run_transitions_allowed
                   WHERE from_state = OLD.state AND to_state = NEW.state) THEN
        RAISE EXCEPTION 'run % cannot go from % to %', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'run_transition_allowed',
                  HINT = 'the state machine (evalkit.runs.machine.ALLOWED) has no such step';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER runs_guard_transition
    BEFORE UPDATE OF state, attempts ON runs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempts IS DISTINCT FROM NEW.attempts)
    EXECUTE FUNCTION runs_guard_transition();

-- One row per recorded transition, written by the statement that records it: who took the
-- step (the server's worker, a user's CLI or SDK, the sweep), from where to where, and why.
CREATE TABLE run_events (
    id          bigserial PRIMARY KEY,
    run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    attempts    integer NOT NULL,
    why         text
);
CREATE INDEX run_events_run_idx ON run_events (run_id, id);
