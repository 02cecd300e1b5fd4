-- A driver may record several consecutive steps of one run in one statement (a chain: the
-- worker's run that the harness finished at once goes starting -> collecting -> scoring),
-- which updates the run's row once instead of once a step. The guard is split in two:
--
-- - run_events: every logged step is one of the machine's steps (run_transitions_allowed);
-- - runs: a change of state is refused unless some chain of those steps leads from the old
--   state to the new one. A step back, or any move out of a final state, is still refused.
--
-- Every write of a run's state logs its steps in the same statement, so the event log still
-- says, step by step, how the run got where it is.
CREATE OR REPLACE FUNCTION runs_guard_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_transitions_allowed
               WHERE from_state = OLD.state AND to_state = NEW.state) THEN
        RETURN NEW;
    END IF;
    IF OLD.state IS DISTINCT FROM NEW.state AND EXISTS (
        WITH RECURSIVE reachable (state) AS (
            SELECT to_state FROM run_transitions_allowed WHERE from_state = OLD.state
            UNION
            SELECT a.to_state FROM run_transitions_allowed a JOIN reachable r
                ON a.from_state = r.state
        )
        SELECT 1 FROM reachable WHERE state = NEW.state
    ) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'run % cannot go from % to %', OLD.id, OLD.state, NEW.state
        USING ERRCODE = 'check_violation', CONSTRAINT = 'run_transition_allowed',
              HINT = 'no chain of the steps in evalkit.runs.machine.ALLOWED leads there';
END;
$$;

CREATE FUNCTION run_events_guard_step() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM run_transitions_allowed
                   WHERE from_state = NEW.from_state AND to_state = NEW.to_state) THEN
        RAISE EXCEPTION 'run % cannot go from % to %', NEW.run_id, NEW.from_state, NEW.to_state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'run_transition_allowed',
                  HINT = 'the state machine (evalkit.runs.machine.ALLOWED) has no such step';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER run_events_guard_step
    BEFORE INSERT ON run_events
    FOR EACH ROW
    EXECUTE FUNCTION run_events_guard_step();
