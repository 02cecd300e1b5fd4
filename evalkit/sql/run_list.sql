-- name: experiment_brief_page :many
-- Experiments newest first, each filter optional (one experiment, home workspace, dataset,
-- agent, status), with their runs counted by state.
SELECT e.id, w.name AS workspace, d.name AS dataset, dw.name AS dataset_workspace,
       a.name AS agent, aw.name AS agent_workspace, e.driver, e.status, e.repetitions,
       e.model, e.split, e.created_at, u.username AS created_by, e.finished_at,
       e.scoring_round,
       (SELECT COALESCE(jsonb_object_agg(c.state, c.n), '{}')
        FROM (SELECT state, count(*) AS n FROM runs r
              WHERE r.experiment_id = e.id GROUP BY state) c) AS by_state
FROM experiments e
JOIN workspaces w ON w.id = e.workspace_id
JOIN datasets d ON d.id = e.dataset_id
JOIN workspaces dw ON dw.id = d.workspace_id
JOIN agents a ON a.id = e.agent_id
JOIN workspaces aw ON aw.id = a.workspace_id
LEFT JOIN users u ON u.id = e.created_by
WHERE (%(experiment_id)s::bigint IS NULL OR e.id = %(experiment_id)s)
  AND (%(workspace_id)s::bigint IS NULL OR e.workspace_id = %(workspace_id)s)
  AND (%(dataset_id)s::bigint IS NULL OR e.dataset_id = %(dataset_id)s)
  AND (%(agent_id)s::bigint IS NULL OR e.agent_id = %(agent_id)s)
  AND (%(status)s::text IS NULL OR e.status = %(status)s)
ORDER BY e.id DESC
OFFSET %(offset)s
LIMIT %(limit)s;

-- name: experiment_brief_count :one
-- How many experiments the same filters as experiment_brief_page match.
SELECT count(*) AS n
FROM experiments e
WHERE (%(experiment_id)s::bigint IS NULL OR e.id = %(experiment_id)s)
  AND (%(workspace_id)s::bigint IS NULL OR e.workspace_id = %(workspace_id)s)
  AND (%(dataset_id)s::bigint IS NULL OR e.dataset_id = %(dataset_id)s)
  AND (%(agent_id)s::bigint IS NULL OR e.agent_id = %(agent_id)s)
  AND (%(status)s::text IS NULL OR e.status = %(status)s);

-- name: score_means_for_experiments :many
-- Per experiment and score name of the given round (each experiment's current one, passed
-- in so the planner sees it): readings, mean value and mean measurement (a name is a gauge
-- when every row of it is one). A failed run's scores are not readings (docs/scoring.md).
SELECT r.experiment_id, s.name, bool_and(s.kind = 'gauge') AS gauge,
       count(*) FILTER (WHERE s.skipped IS NULL AND r.state <> 'failed'
                          AND (s.value IS NOT NULL OR jsonb_typeof(s.raw) = 'number'))
           AS readings,
       avg(s.value) FILTER (WHERE s.skipped IS NULL AND r.state <> 'failed') AS mean,
       avg((s.raw #>> '{}')::float8)
           FILTER (WHERE s.skipped IS NULL AND r.state <> 'failed'
                     AND jsonb_typeof(s.raw) = 'number') AS raw_mean
FROM unnest(%(experiment_ids)s::bigint[], %(rounds)s::integer[]) AS x (id, round)
JOIN runs r ON r.experiment_id = x.id
JOIN scores s ON s.run_id = r.id AND s.round = x.round
GROUP BY r.experiment_id, s.name
ORDER BY r.experiment_id, s.name;

-- name: score_newest_id :one
-- The newest score's id anywhere: scores are only ever inserted, so while it stays the same
-- no mean of any experiment has changed.
SELECT COALESCE(max(id), 0) AS id FROM scores;

-- name: score_version_get :one
-- What changes whenever a score of an experiment's round is added (scores are only ever
-- inserted): how many scores the round has and the newest one's id; and how many runs
-- ended failed or errored (their scores are read apart, and a run ends after its scores).
SELECT count(*) AS n, COALESCE(max(s.id), 0) AS last_id,
       (SELECT count(*) FROM runs f
        WHERE f.experiment_id = %(experiment_id)s
          AND f.state IN ('failed', 'errored')) AS unanswered
FROM runs r
JOIN scores s ON s.run_id = r.id AND s.round = %(round)s
WHERE r.experiment_id = %(experiment_id)s;

-- name: run_list_count :one
-- How many runs of an experiment the filters of run_list_page match.
SELECT count(*) AS n
FROM runs r
WHERE r.experiment_id = %(experiment_id)s
  AND (%(state)s::text IS NULL OR r.state = %(state)s)
  AND (%(case_id)s::text IS NULL OR r.case_id = %(case_id)s)
  AND (%(tag)s::text IS NULL OR EXISTS (
        SELECT 1 FROM case_versions v
        LEFT JOIN case_versions tv ON tv.id = r.target_version_id
        WHERE v.id = r.case_version_id
          AND COALESCE(v.content -> 'tags', tv.content -> 'tags') ? %(tag)s))
  AND (%(score)s::text IS NULL OR EXISTS (
        SELECT 1 FROM scores s
        WHERE s.run_id = r.id AND s.round = %(round)s AND s.name = %(score)s
          AND s.skipped IS NULL
          AND (%(below)s::float8 IS NULL OR s.value < %(below)s)));

-- name: run_list_page :many
-- One page of an experiment's runs in run order, filtered by state, case, a tag of the
-- case and a score of the given round (a reading of it, or a value below a threshold);
-- the page is picked first so only its runs read their trajectory's cost.
WITH page AS (
    SELECT r.id
    FROM runs r
    WHERE r.experiment_id = %(experiment_id)s
      AND (%(state)s::text IS NULL OR r.state = %(state)s)
      AND (%(case_id)s::text IS NULL OR r.case_id = %(case_id)s)
      AND (%(tag)s::text IS NULL OR EXISTS (
            SELECT 1 FROM case_versions v
            LEFT JOIN case_versions tv ON tv.id = r.target_version_id
            WHERE v.id = r.case_version_id
              AND COALESCE(v.content -> 'tags', tv.content -> 'tags') ? %(tag)s))
      AND (%(score)s::text IS NULL OR EXISTS (
            SELECT 1 FROM scores s
            WHERE s.run_id = r.id AND s.round = %(round)s AND s.name = %(score)s
              AND s.skipped IS NULL
              AND (%(below)s::float8 IS NULL OR s.value < %(below)s)))
    ORDER BY r.id
    OFFSET %(offset)s
    LIMIT %(limit)s
)
SELECT r.id, r.case_id, r.repetition, r.state, r.harness_status, r.error, r.timed_out,
       r.attempts, r.created_at, r.started_at, r.finished_at,
       extract(epoch FROM COALESCE(r.harness_done_at, r.finished_at) - r.started_at)::float8
           AS seconds,
       COALESCE(v.content -> 'tags', tv.content -> 'tags') AS tags,
       t.valid AS trajectory_valid, t.partial AS trajectory_partial,
       COALESCE(
           (SELECT (c.raw #>> '{}')::float8 FROM scores c
            WHERE c.run_id = r.id AND c.round = %(round)s AND c.name = 'cost'
              AND jsonb_typeof(c.raw) = 'number'),
           CASE WHEN jsonb_typeof(t.body #> '{final_metrics,total_cost_usd}') = 'number'
                THEN (t.body #>> '{final_metrics,total_cost_usd}')::float8 END
       ) AS cost_usd
FROM page
JOIN runs r ON r.id = page.id
JOIN case_versions v ON v.id = r.case_version_id
LEFT JOIN case_versions tv ON tv.id = r.target_version_id
LEFT JOIN trajectories t ON t.run_id = r.id
ORDER BY r.id;

-- name: run_list_scores :many
-- The scores of some runs in one round.
SELECT s.run_id, s.name, s.kind, s.value, s.raw, s.skipped IS NOT NULL AS skipped,
       s.error IS NOT NULL AS error
FROM scores s
WHERE s.run_id = ANY(%(run_ids)s::bigint[]) AND s.round = %(round)s
ORDER BY s.run_id, s.name;

-- name: experiment_case_tags :many
-- Every tag of the cases an experiment pinned (an overlay's own tags, else its target's).
SELECT DISTINCT tag
FROM (SELECT DISTINCT case_version_id, target_version_id
      FROM runs WHERE experiment_id = %(experiment_id)s) p
JOIN case_versions v ON v.id = p.case_version_id
LEFT JOIN case_versions tv ON tv.id = p.target_version_id
CROSS JOIN LATERAL jsonb_array_elements_text(
    CASE WHEN jsonb_typeof(COALESCE(v.content -> 'tags', tv.content -> 'tags')) = 'array'
         THEN COALESCE(v.content -> 'tags', tv.content -> 'tags')
         ELSE '[]'::jsonb END
) AS tag
ORDER BY tag;

-- name: score_histograms :many
-- Per evaluator score name of an experiment's round: its values counted in ten equal bins
-- of [0, 1] (a value of 1 falls in the last); failed runs are not judged, so not counted.
SELECT s.name, LEAST(width_bucket(s.value, 0, 1, 10), 10) AS bin, count(*) AS n
FROM runs r
JOIN scores s ON s.run_id = r.id AND s.round = %(round)s
WHERE r.experiment_id = %(experiment_id)s AND r.state <> 'failed' AND s.kind = 'evaluator'
  AND s.skipped IS NULL AND s.value IS NOT NULL
GROUP BY s.name, bin
ORDER BY s.name, bin;

-- name: run_measure_histograms :many
-- Latency (seconds from start to the harness's final status, or the run's end) and cost
-- (USD: the cost score, else the trajectory's final_metrics, read only for runs without
-- the score) of an experiment's runs, counted in equal bins from 0 to the largest, with
-- percentiles: a row per measure and bin.
WITH m AS (
    SELECT extract(epoch FROM COALESCE(r.harness_done_at, r.finished_at) - r.started_at)::float8
               AS seconds,
           COALESCE(
               (c.raw #>> '{}')::float8,
               (SELECT CASE WHEN jsonb_typeof(t.body #> '{final_metrics,total_cost_usd}')
                                 = 'number'
                            THEN (t.body #>> '{final_metrics,total_cost_usd}')::float8 END
                FROM trajectories t WHERE t.run_id = r.id)
           ) AS cost
    FROM runs r
    LEFT JOIN scores c ON c.run_id = r.id AND c.round = %(round)s AND c.name = 'cost'
                      AND jsonb_typeof(c.raw) = 'number'
    WHERE r.experiment_id = %(experiment_id)s
), measured AS (
    SELECT 'latency' AS measure, seconds AS x FROM m WHERE seconds IS NOT NULL
    UNION ALL
    SELECT 'cost', cost FROM m WHERE cost IS NOT NULL
), bounds AS (
    SELECT measure, LEAST(min(x), 0) AS low, max(x) AS high, count(*) AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY x) AS p95
    FROM measured
    GROUP BY measure
)
SELECT b.measure, b.low, b.high, b.runs, b.p50, b.p95,
       CASE WHEN b.high > b.low
            THEN LEAST(width_bucket(x.x, b.low, b.high, %(bins)s), %(bins)s)
            ELSE 1 END AS bin,
       count(*) AS n
FROM measured x
JOIN bounds b ON b.measure = x.measure
GROUP BY b.measure, b.low, b.high, b.runs, b.p50, b.p95, bin
ORDER BY b.measure, bin;

-- name: case_compare_table :many
-- Experiments a and b case by case: every case either ran, its runs on each side, and per
-- evaluator score name of each one's round (passed in, so the planner sees it) the mean of
-- the case's values on both sides (null where a side has none; failed runs are not judged);
-- and each side's failed runs of the case.
WITH per_a AS (
    SELECT r.case_id, s.name, avg(s.value) AS v
    FROM runs r
    JOIN scores s ON s.run_id = r.id AND s.round = %(round_a)s
    WHERE r.experiment_id = %(a)s AND r.state <> 'failed' AND s.kind = 'evaluator'
      AND s.skipped IS NULL
      AND s.value IS NOT NULL
    GROUP BY r.case_id, s.name
), per_b AS (
    SELECT r.case_id, s.name, avg(s.value) AS v
    FROM runs r
    JOIN scores s ON s.run_id = r.id AND s.round = %(round_b)s
    WHERE r.experiment_id = %(b)s AND r.state <> 'failed' AND s.kind = 'evaluator'
      AND s.skipped IS NULL
      AND s.value IS NOT NULL
    GROUP BY r.case_id, s.name
), pairs AS (
    SELECT COALESCE(pa.case_id, pb.case_id) AS case_id, COALESCE(pa.name, pb.name) AS name,
           pa.v AS a, pb.v AS b
    FROM per_a pa
    FULL JOIN per_b pb ON pb.case_id = pa.case_id AND pb.name = pa.name
), counted AS (
    SELECT case_id, count(*) FILTER (WHERE experiment_id = %(a)s) AS runs_a,
           count(*) FILTER (WHERE experiment_id = %(b)s) AS runs_b,
           count(*) FILTER (WHERE experiment_id = %(a)s AND state = 'failed') AS failed_a,
           count(*) FILTER (WHERE experiment_id = %(b)s AND state = 'failed') AS failed_b
    FROM runs
    WHERE experiment_id IN (%(a)s, %(b)s)
    GROUP BY case_id
)
SELECT c.case_id, c.runs_a, c.runs_b, c.failed_a, c.failed_b,
       COALESCE(jsonb_agg(jsonb_build_object('name', p.name, 'a', p.a, 'b', p.b)
                          ORDER BY p.name) FILTER (WHERE p.name IS NOT NULL),
                '[]'::jsonb) AS scores
FROM counted c
LEFT JOIN pairs p ON p.case_id = c.case_id
GROUP BY c.case_id, c.runs_a, c.runs_b, c.failed_a, c.failed_b
ORDER BY c.case_id;
