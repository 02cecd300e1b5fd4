-- name: case_search_in_dataset :many
-- One page of a dataset's cases at their current version, filtered by state, tag, split and
-- a piece of the id; every row carries the total and the tags and splits of the live cases
-- (the filter choices); an empty page is one row with null case columns. The tags are
-- gathered from the distinct tag lists, far fewer than the cases.
WITH cur AS MATERIALIZED (
    SELECT c.case_id, v.version, v.review_state, v.removed, v.overlay_target, v.source,
           v.created_at,
           CASE WHEN jsonb_typeof(v.content -> 'tags') = 'array'
                THEN v.content -> 'tags' ELSE '[]'::jsonb END AS tags,
           CASE WHEN jsonb_typeof(v.content -> 'split') = 'string'
                THEN v.content ->> 'split' END AS split
    FROM cases c
    JOIN case_versions v ON v.case_pk = c.id AND v.version = c.current_version
    WHERE c.dataset_id = %(dataset_id)s
), hits AS MATERIALIZED (
    SELECT * FROM cur
    WHERE CASE %(state)s::text
            WHEN 'all' THEN true
            WHEN 'live' THEN NOT removed
            WHEN 'removed' THEN removed
            ELSE NOT removed AND review_state = %(state)s::text
          END
      AND (%(tag)s::text IS NULL OR tags ? %(tag)s::text)
      AND (%(split)s::text IS NULL OR split = %(split)s::text)
      AND (%(text)s::text IS NULL OR strpos(lower(case_id), lower(%(text)s::text)) > 0)
)
SELECT t.total, t.all_tags, t.all_splits, h.case_id, h.version, h.review_state, h.removed,
       h.overlay_target, h.source, h.created_at, h.tags, h.split
FROM (
    SELECT
        (SELECT count(*) FROM hits) AS total,
        COALESCE((
            SELECT jsonb_agg(tag ORDER BY tag) FROM (
                SELECT DISTINCT tag
                FROM (SELECT DISTINCT tags FROM cur WHERE NOT removed) AS sets,
                     jsonb_array_elements_text(sets.tags) AS tag
            ) used
        ), '[]'::jsonb) AS all_tags,
        COALESCE((
            SELECT jsonb_agg(split ORDER BY split) FROM (
                SELECT DISTINCT split FROM cur WHERE NOT removed AND split IS NOT NULL
            ) used
        ), '[]'::jsonb) AS all_splits
) t
LEFT JOIN LATERAL (
    SELECT * FROM hits ORDER BY case_id LIMIT %(limit)s OFFSET %(offset)s
) h ON true;

-- name: case_version_list_promotions :many
-- The approved copies promotion made from a source dataset into a target dataset
-- (optionally of one case id), newest first, with the version each came from; every row
-- carries the total.
SELECT tc.case_id, tw.name AS target_workspace, td.name AS target_dataset,
       tv.version AS target_version, sw.name AS source_workspace, sd.name AS source_dataset,
       sv.version AS source_version, tv.review_state, tv.created_at, u.username AS actor,
       count(*) OVER () AS total
FROM cases tc
JOIN case_versions tv ON tv.case_pk = tc.id
JOIN datasets td ON td.id = tc.dataset_id
JOIN workspaces tw ON tw.id = tc.workspace_id
JOIN case_versions sv ON sv.id = tv.promoted_from
JOIN cases sc ON sc.id = sv.case_pk
JOIN datasets sd ON sd.id = sc.dataset_id
JOIN workspaces sw ON sw.id = sc.workspace_id
LEFT JOIN users u ON u.id = tv.created_by
WHERE tc.dataset_id = %(target_dataset_id)s AND sc.dataset_id = %(source_dataset_id)s
  AND (%(case_id)s::text IS NULL OR tc.case_id = %(case_id)s::text)
ORDER BY tv.created_at DESC, tv.id DESC
LIMIT %(limit)s OFFSET %(offset)s;
