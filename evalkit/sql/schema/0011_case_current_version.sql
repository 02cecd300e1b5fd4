-- The current version of a case (its highest version number), kept on the case: a page of
-- a dataset's cases joins each case to that one version instead of looking for the newest
-- among all of its versions (a lookup per case, 10,000 for a dataset of 10,000 cases).
-- Versions are only ever added by case_version_insert_many (sync, promotion's approved
-- copy), which advances the mark in the same statement; review decisions and removal or
-- restore change a version's state, not which version is current. Null only inside the
-- transaction that creates a case, until its first version is added.
ALTER TABLE cases ADD COLUMN current_version integer;
ALTER TABLE cases ADD CONSTRAINT cases_current_version_check CHECK (current_version >= 1);

UPDATE cases c
SET current_version = newest.version
FROM (SELECT case_pk, max(version) AS version FROM case_versions GROUP BY case_pk) newest
WHERE newest.case_pk = c.id;
