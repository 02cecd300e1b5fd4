-- Human labels: a person's reading of one score of one run (pass = 1, fail = 0, or a number
-- in the score's range [0, 1]). A new reading is a new row, never an update, so two people
-- (or one person twice) labelling the same run are all kept, with who and when.
CREATE TABLE labels (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name text NOT NULL,
    value double precision NOT NULL CHECK (value >= 0 AND value <= 1),
    comment text,
    user_id bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX labels_by_run ON labels (run_id, name, id);
