-- Reads of procrastinate's own table, procrastinate_jobs (checked against procrastinate
-- 3.10.0). Only evalkit.jobs.procrastinate_adapter runs these: an upgrade re-checks them there.

-- name: procrastinate_waiting_locks :many
-- Which of these queueing locks have a job waiting (todo: what procrastinate's unique index
-- on queueing_lock covers, so a defer under one of them would be refused).
SELECT queueing_lock FROM procrastinate_jobs
WHERE status = 'todo' AND queueing_lock = ANY(%(locks)s::text[]);

-- name: procrastinate_live_locks :many
-- Which of these queueing locks have a job waiting or running (todo or doing).
SELECT DISTINCT queueing_lock FROM procrastinate_jobs
WHERE status IN ('todo', 'doing') AND queueing_lock = ANY(%(locks)s::text[]);

-- name: procrastinate_jobs_per_round :many
-- Jobs of one task over some runs (its run_id argument), per its round argument: those
-- waiting or running, and those that failed for good.
SELECT (args ->> 'round')::integer AS round,
       count(*) FILTER (WHERE status IN ('todo', 'doing')) AS pending,
       count(*) FILTER (WHERE status = 'failed') AS failed
FROM procrastinate_jobs
WHERE task_name = %(task_name)s AND (args ->> 'run_id')::bigint = ANY(%(run_ids)s::bigint[])
GROUP BY 1;
