-- Whether a sync came from a git tree with uncommitted changes in the files it read (the
-- suite directory, evalkit.yaml, the fixture files its cases use): the branch and sha then
-- name the commit the tree started from, not what was synced. Kept on the dataset (its last
-- sync) and on the changelog entries that sync wrote. False for syncs made before this
-- column, and for entries that are not syncs.
ALTER TABLE datasets ADD COLUMN last_sync_dirty boolean NOT NULL DEFAULT false;
ALTER TABLE case_events ADD COLUMN dirty boolean NOT NULL DEFAULT false;
