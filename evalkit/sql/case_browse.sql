-- name: case_search_in_dataset :many
-- One page of a dataset's cases at their current version, filtered by state, tag, split and
-- a piece of the id; every row carries the total; an empty page is one row of nulls.
WITH cur AS (
    SELECT DISTINCT ON (c.id) c.case_id, v.version, v.review_state, v.removed,
           v.overlay_target, v.source, v.created_at,
           CASE WHEN jsonb_typeof(v.content -> 'tags') = 'array'
                THEN v.content -> 'tags' ELSE '[]'::jsonb END AS tags,
           CASE WHEN jsonb_typeof(v.content -> 'split') = 'string'
                THEN v.content ->> 'split' END AS split
    FROM cases c JOIN case_versions v ON v.case_pk = c.id
    WHERE c.dataset_id = %(dataset_id)s
    ORDER BY c.id, v.version DESC
), hits AS (
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
SELECT t.total, h.case_id, h.version, h.review_state, h.removed, h.overlay_target, h.source,
       h.created_at, h.tags, h.split
FROM (SELECT count(*) AS total FROM hits) t
LEFT JOIN LATERAL (
    SELECT * FROM hits ORDER BY case_id LIMIT %(limit)s OFFSET %(offset)s
) h ON true;

-- name: case_facets_in_dataset :one
-- The tags and splits a dataset's live cases use, sorted, to offer as filters.
WITH cur AS (
    SELECT DISTINCT ON (c.id) v.content, v.removed
    FROM cases c JOIN case_versions v ON v.case_pk = c.id
    WHERE c.dataset_id = %(dataset_id)s
    ORDER BY c.id, v.version DESC
), live AS (
    SELECT content FROM cur WHERE NOT removed
)
SELECT
    COALESCE((
        SELECT jsonb_agg(DISTINCT tag ORDER BY tag)
        FROM live, jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(content -> 'tags') = 'array'
                 THEN content -> 'tags' ELSE '[]'::jsonb END
        ) AS tag
    ), '[]'::jsonb) AS tags,
    COALESCE((
        SELECT jsonb_agg(DISTINCT content ->> 'split' ORDER BY content ->> 'split')
        FROM live WHERE jsonb_typeof(content -> 'split') = 'string'
    ), '[]'::jsonb) AS splits;

-- name: case_version_list_promotions :many
-- Approved copies made by promotion into or out of a dataset (optionally of one case id),
-- newest first, with the version each came from; every row carries the total.
SELECT tc.case_id, tw.name AS target_workspace, td.name AS target_dataset,
       tv.version AS target_version, sw.name AS source_workspace, sd.name AS source_dataset,
       sv.version AS source_version, tv.review_state, tv.created_at, u.username AS actor,
       count(*) OVER () AS total
FROM case_versions tv
JOIN cases tc ON tc.id = tv.case_pk
JOIN datasets td ON td.id = tc.dataset_id
JOIN workspaces tw ON tw.id = tc.workspace_id
JOIN case_versions sv ON sv.id = tv.promoted_from
JOIN cases sc ON sc.id = sv.case_pk
JOIN datasets sd ON sd.id = sc.dataset_id
JOIN workspaces sw ON sw.id = sc.workspace_id
LEFT JOIN users u ON u.id = tv.created_by
WHERE (tc.dataset_id = %(dataset_id)s OR sc.dataset_id = %(dataset_id)s)
  AND (%(case_id)s::text IS NULL OR tc.case_id = %(case_id)s::text
       OR sc.case_id = %(case_id)s::text)
ORDER BY tv.created_at DESC, tv.id DESC
LIMIT %(limit)s OFFSET %(offset)s;
