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
-- Jobs of one task over the runs of an experiment (its run_id argument), per its round
-- argument: those waiting or running, and those that failed for good.
SELECT (j.args ->> 'round')::integer AS round,
       count(*) FILTER (WHERE j.status IN ('todo', 'doing')) AS pending,
       count(*) FILTER (WHERE j.status = 'failed') AS failed
FROM procrastinate_jobs j
JOIN runs r ON r.id = (j.args ->> 'run_id')::bigint
WHERE j.task_name = %(task_name)s AND r.experiment_id = %(experiment_id)s
GROUP BY 1;
