-- Reads of procrastinate's own tables, procrastinate_jobs and procrastinate_workers (checked
-- against procrastinate 3.10.0), and the workers' liveness locks. Only
-- evalkit.jobs.procrastinate_adapter and evalkit.jobs.liveness run these: an upgrade re-checks
-- them there.

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

-- name: worker_liveness_keepalives :exec
-- On a worker's liveness session: PostgreSQL gives up on the connection (ending the session,
-- so the lock goes) when the worker's machine stops answering for about lost_after seconds.
-- Ignored on a Unix socket, where the worker shares the database's machine.
SELECT set_config('tcp_keepalives_idle', %(idle)s::text, false),
       set_config('tcp_keepalives_interval', %(interval)s::text, false),
       set_config('tcp_keepalives_count', %(count)s::text, false),
       set_config('tcp_user_timeout', %(user_timeout_ms)s::text, false);

-- name: worker_liveness_lock :one
-- Take a worker's liveness lock for the session (waits while an older session of the same
-- worker, not yet ended, still holds it).
SELECT pg_advisory_lock(%(namespace)s, %(worker_id)s::integer) IS NOT NULL AS locked;

-- name: worker_liveness_ping :one
-- Keep the liveness session busy (no idle timeout ends it) and see that it still answers.
SELECT 1 AS ok;

-- name: worker_liveness_sweep_lock :one
-- One sweep of dead workers at a time (for the transaction): two would retry the same job.
SELECT pg_advisory_xact_lock(%(namespace)s, 0) IS NOT NULL AS locked;

-- name: procrastinate_worker_registered :one
-- Whether a worker is still registered (a sweep removes the workers it took as dead).
SELECT EXISTS (SELECT 1 FROM procrastinate_workers WHERE id = %(worker_id)s) AS registered;

-- name: procrastinate_worker_liveness :many
-- Every registered worker: whether a session holds its liveness lock, how long since its last
-- heartbeat, and how many jobs it is running.
SELECT w.id,
       w.id IN (
           SELECT l.objid::bigint FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
             AND l.classid = %(namespace)s::bigint::oid
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       ) AS locked,
       extract(epoch FROM clock_timestamp() - w.last_heartbeat)::float8 AS silent_for,
       (SELECT count(*) FROM procrastinate_jobs j
        WHERE j.worker_id = w.id AND j.status = 'doing') AS doing
FROM procrastinate_workers w
ORDER BY w.id;

-- name: procrastinate_jobs_abandoned :many
-- The running jobs of these workers and those with no worker (its row was removed), with the
-- columns procrastinate's Job.from_row reads.
SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, queue_name,
       attempts, abort_requested, worker_id
FROM procrastinate_jobs
WHERE status = 'doing' AND (worker_id IS NULL OR worker_id = ANY(%(worker_ids)s::bigint[]))
ORDER BY id;
