"""cases.current_version, the mark of each case's current version: every writer keeps it at
the case's highest version number (sync adding, changing, removing, restoring; a review
decision; promotion's approved copy), the migration backfills it, and the case search reads
the same cases through it as the lookup of the newest version did."""

from __future__ import annotations

import httpx
import psycopg
from alembic import command
from psycopg.rows import dict_row

from evalkit.sql import migrate, queries
from tests.integration.datasets_helpers import admin_api

# Worked out in SQL apart from the mark: each case's highest version number.
MARK_VS_NEWEST = """
SELECT w.name || '/' || c.case_id, c.current_version,
       (SELECT max(v.version) FROM case_versions v WHERE v.case_pk = c.id)
FROM cases c JOIN workspaces w ON w.id = c.workspace_id
ORDER BY 1
"""

# The case search as it was before the mark: the newest version found per case.
SEARCH_BY_NEWEST = """
SELECT c.case_id, v.version, v.review_state, v.removed, v.content
FROM cases c
JOIN datasets d ON d.id = c.dataset_id
JOIN workspaces w ON w.id = d.workspace_id
CROSS JOIN LATERAL (
    SELECT * FROM case_versions cv WHERE cv.case_pk = c.id ORDER BY cv.version DESC LIMIT 1
) v
WHERE w.name = %(workspace)s AND d.name = %(dataset)s
ORDER BY c.case_id
"""


def _case(case_id: str, answer: str, *, tags: list[str], split: str) -> dict:
    return {
        "id": case_id,
        "content": {
            "input": {"question": f"What about {case_id}?"},
            "expected": {"answer": answer},
            "tags": tags,
            "split": split,
        },
    }


def _marks(db_url: str) -> dict[str, int]:
    """Each case's mark, after checking it equals its highest version number."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(MARK_VS_NEWEST).fetchall()
    wrong = [(name, mark, newest) for name, mark, newest in rows if mark != newest]
    assert wrong == [], f"current_version is not the highest version: {wrong}"
    return {name: mark for name, mark, _ in rows}


def _sync(server, token: str, cases: list[dict]) -> dict:
    return admin_api(
        server, token, "POST", "/api/workspaces/dev/datasets/finance/sync", json={"cases": cases}
    ).json()


def test_every_writer_keeps_the_mark_at_the_highest_version(server, admin_token):
    api = lambda method, path, **kw: admin_api(server, admin_token, method, path, **kw)  # noqa: E731
    for ws in ("dev", "prod"):
        api("POST", "/api/workspaces", json={"name": ws})
    api("PUT", "/api/workspaces/dev/promotion", json={"target": "prod"})
    api("POST", "/api/workspaces/prod/datasets", json={"name": "finance"})

    a1 = _case("alpha", "1", tags=["math"], split="train")
    b1 = _case("beta", "2", tags=["math", "eu"], split="test")
    c1 = _case("gamma", "3", tags=["billing"], split="train")
    # added
    assert _sync(server, admin_token, [a1, b1, c1])["added"] == ["alpha", "beta", "gamma"]
    assert _marks(server.db_url) == {"dev/alpha": 1, "dev/beta": 1, "dev/gamma": 1}

    # changed (alpha), removed (beta, left out), unchanged (gamma)
    a2 = _case("alpha", "1.0", tags=["math"], split="train")
    out = _sync(server, admin_token, [a2, c1])
    assert (out["changed"], out["removed"]) == (["alpha"], ["beta"])
    assert _marks(server.db_url) == {"dev/alpha": 2, "dev/beta": 1, "dev/gamma": 1}

    # restored unchanged (beta: no new version), then removed again and restored changed
    assert _sync(server, admin_token, [a2, b1, c1])["restored"] == ["beta"]
    assert _marks(server.db_url)["dev/beta"] == 1
    assert _sync(server, admin_token, [a2, c1])["removed"] == ["beta"]
    b2 = _case("beta", "2.0", tags=["eu"], split="test")
    assert _sync(server, admin_token, [a2, b2, c1])["restored"] == ["beta"]
    assert _marks(server.db_url) == {"dev/alpha": 2, "dev/beta": 2, "dev/gamma": 1}

    # review decisions change a version's state, not which one is current
    api("POST", "/api/workspaces/dev/cases/beta/reject", json={"comment": "no"})
    assert _marks(server.db_url)["dev/beta"] == 2

    # approval promotes an approved copy: a new case in prod, then a new version of it
    api("POST", "/api/workspaces/dev/cases/gamma/approve", json={})
    assert _marks(server.db_url)["prod/gamma"] == 1
    c2 = _case("gamma", "3.0", tags=["billing"], split="train")
    _sync(server, admin_token, [a2, b2, c2])
    api("POST", "/api/workspaces/dev/cases/gamma/approve", json={})
    assert _marks(server.db_url) == {
        "dev/alpha": 2,
        "dev/beta": 2,
        "dev/gamma": 2,
        "prod/gamma": 2,
    }
    # approving again copies nothing new
    api("POST", "/api/workspaces/dev/cases/gamma/approve", json={})
    assert _marks(server.db_url)["prod/gamma"] == 2

    # the dataset list counts, and the search, read the current versions through the mark
    listed = api("GET", "/api/workspaces/dev/datasets").json()
    assert [(d["name"], d["cases"], d["review"]) for d in listed] == [
        ("finance", 3, {"pending": 1, "approved": 1, "rejected": 1, "removed": 0})
    ]
    _search_matches_newest(server, admin_token, "dev")
    _search_matches_newest(server, admin_token, "prod")


def _search_matches_newest(server, token: str, workspace: str) -> None:
    """Every filter of the case search gives the cases the newest-version lookup gives."""
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            SEARCH_BY_NEWEST, {"workspace": workspace, "dataset": "finance"}
        ).fetchall()
    newest = [
        {
            "id": case_id,
            "version": version,
            "review_state": state,
            "removed": removed,
            "tags": content.get("tags", []),
            "split": content.get("split"),
        }
        for case_id, version, state, removed, content in rows
    ]
    live = [c for c in newest if not c["removed"]]
    filters: list[tuple[dict, list[dict]]] = [
        ({}, live),
        ({"state": "all"}, newest),
        ({"state": "removed"}, [c for c in newest if c["removed"]]),
    ]
    for state in ("pending", "approved", "rejected"):
        filters.append(({"state": state}, [c for c in live if c["review_state"] == state]))
    for tag in ("math", "eu", "billing"):
        filters.append(({"tag": tag}, [c for c in live if tag in c["tags"]]))
    for split in ("train", "test"):
        filters.append(({"split": split}, [c for c in live if c["split"] == split]))
    filters.append(({"q": "MM"}, [c for c in live if "mm" in c["id"]]))
    filters.append(({"limit": 1, "offset": 1}, live[1:2]))
    path = f"/api/workspaces/{workspace}/datasets/finance/case-search"
    for params, expected in filters:
        page = httpx.get(
            server.url + path, params=params, headers={"Authorization": f"Bearer {token}"}
        ).json()
        got = [
            {k: c[k] for k in ("id", "version", "review_state", "removed", "tags", "split")}
            for c in page["cases"]
        ]
        paging = "limit" in params
        assert got == (expected if paging else expected[:50]), params
        assert page["total"] == (len(live) if paging else len(expected)), params
    everything = httpx.get(server.url + path, headers={"Authorization": f"Bearer {token}"}).json()
    assert everything["tags"] == sorted({t for c in live for t in c["tags"]})
    assert everything["splits"] == sorted({c["split"] for c in live if c["split"]})


def test_migration_backfills_the_mark(new_database):
    db_url = new_database(template=False)
    config = migrate.alembic_config(db_url)
    command.upgrade(config, "0010")
    with psycopg.connect(db_url) as conn:
        ws = conn.execute(
            "INSERT INTO workspaces (name, kind) VALUES ('dev', 'shared') RETURNING id"
        ).fetchone()[0]
        ds = conn.execute(
            "INSERT INTO datasets (workspace_id, name) VALUES (%s, 'finance') RETURNING id",
            (ws,),
        ).fetchone()[0]
        for case_id, versions in (("one", 1), ("three", 3), ("two", 2)):
            pk = conn.execute(
                "INSERT INTO cases (workspace_id, dataset_id, case_id) VALUES (%s, %s, %s) "
                "RETURNING id",
                (ws, ds, case_id),
            ).fetchone()[0]
            for n in range(1, versions + 1):
                conn.execute(
                    "INSERT INTO case_versions (case_pk, version, content, content_hash, "
                    "version_hash) VALUES (%s, %s, '{}', 'h', 'h')",
                    (pk, n),
                )
    command.upgrade(config, "head")
    assert _marks(db_url) == {"dev/one": 1, "dev/three": 3, "dev/two": 2}


# The five lookups that read a case's current version, as they were before the mark: the
# newest version of each case found among all of its versions (DISTINCT ON ... ORDER BY
# version DESC, or ORDER BY version DESC LIMIT 1). The switched queries, read from
# evalkit/sql, must give the same rows after every writer.
OLD_LOOKUPS = {
    "case_list_current_for_sync": """
        SELECT DISTINCT ON (c.id) c.id AS case_pk, c.case_id, v.id AS version_id, v.version,
               v.version_hash, v.removed, v.overlay_target,
               CASE WHEN jsonb_typeof(v.content #> '{evaluators,custom}') = 'object'
                    THEN ARRAY(SELECT jsonb_object_keys(v.content #> '{evaluators,custom}'))
               END AS custom_names
        FROM cases c JOIN case_versions v ON v.case_pk = c.id
        WHERE c.dataset_id = %(dataset_id)s
        ORDER BY c.id, v.version DESC
    """,
    "case_list_in_dataset": """
        SELECT DISTINCT ON (c.case_id) c.case_id, v.version, v.review_state, v.removed,
               v.overlay_target, v.source, v.created_at
        FROM cases c JOIN case_versions v ON v.case_pk = c.id
        WHERE c.dataset_id = %(dataset_id)s
        ORDER BY c.case_id, v.version DESC
    """,
    "case_list_live_targets": """
        SELECT cur.case_id FROM (
            SELECT DISTINCT ON (c.id) c.case_id, c.dataset_id, v.removed
            FROM cases c JOIN case_versions v ON v.case_pk = c.id
            WHERE c.workspace_id = %(workspace_id)s AND c.case_id = ANY(%(case_ids)s::text[])
            ORDER BY c.id, v.version DESC
        ) cur
        WHERE NOT cur.removed
          AND (%(dataset_id)s::bigint IS NULL OR cur.dataset_id <> %(dataset_id)s::bigint)
        ORDER BY cur.case_id
    """,
    "case_list_overlays_of": """
        SELECT cur.case_pk, cur.case_id, cur.dataset, cur.version_id FROM (
            SELECT DISTINCT ON (c.id) c.id AS case_pk, c.case_id, d.name AS dataset,
                   v.id AS version_id, v.removed, v.review_state, v.overlay_target
            FROM cases c
            JOIN datasets d ON d.id = c.dataset_id
            JOIN case_versions v ON v.case_pk = c.id
            WHERE c.workspace_id = %(workspace_id)s
            ORDER BY c.id, v.version DESC
        ) cur
        WHERE cur.overlay_target = %(case_id)s AND NOT cur.removed
          AND cur.review_state <> 'rejected'
        ORDER BY cur.case_id
    """,
    "experiment_case_pins": """
        SELECT cur.case_id, cur.version_id, cur.removed, cur.content, cur.overlay_target,
               (SELECT v2.id FROM cases c2 JOIN case_versions v2 ON v2.case_pk = c2.id
                WHERE c2.workspace_id = %(workspace_id)s AND c2.case_id = cur.overlay_target
                ORDER BY v2.version DESC LIMIT 1) AS target_version_id,
               (SELECT v2.content FROM cases c2 JOIN case_versions v2 ON v2.case_pk = c2.id
                WHERE c2.workspace_id = %(workspace_id)s AND c2.case_id = cur.overlay_target
                ORDER BY v2.version DESC LIMIT 1) AS target_content
        FROM (
            SELECT DISTINCT ON (c.id) c.case_id, v.id AS version_id, v.removed, v.content,
                   v.overlay_target
            FROM cases c JOIN case_versions v ON v.case_pk = c.id
            WHERE c.dataset_id = %(dataset_id)s
            ORDER BY c.id, v.version DESC
        ) cur
        ORDER BY cur.case_id
    """,
}


def _switched_match_old(db_url: str) -> dict[str, dict]:
    """Run every switched query and its old lookup with every parameter the data allows
    (each dataset, each workspace with each of its datasets and none, each case id as an
    overlay target); assert the rows are the same; return the new rows by query and key."""
    seen: dict[str, dict] = {name: {} for name in OLD_LOOKUPS}
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        workspaces = conn.execute("SELECT id, name FROM workspaces ORDER BY id").fetchall()
        for ws in workspaces:
            datasets = conn.execute(
                "SELECT id, name FROM datasets WHERE workspace_id = %s ORDER BY id", (ws["id"],)
            ).fetchall()
            case_ids = [
                r["case_id"]
                for r in conn.execute(
                    "SELECT case_id FROM cases WHERE workspace_id = %s ORDER BY case_id",
                    (ws["id"],),
                ).fetchall()
            ]
            calls: list[tuple[str, str, dict]] = []
            for ds in datasets:
                key = f"{ws['name']}/{ds['name']}"
                for name in ("case_list_current_for_sync", "case_list_in_dataset"):
                    calls.append((name, key, {"dataset_id": ds["id"]}))
                calls.append(
                    (
                        "experiment_case_pins",
                        key,
                        {"workspace_id": ws["id"], "dataset_id": ds["id"]},
                    )
                )
            for ds in [*datasets, {"id": None, "name": None}]:
                calls.append(
                    (
                        "case_list_live_targets",
                        f"{ws['name']}/{ds['name']}",
                        {
                            "workspace_id": ws["id"],
                            "case_ids": [*case_ids, "no-such-case"],
                            "dataset_id": ds["id"],
                        },
                    )
                )
            for case_id in case_ids:
                calls.append(
                    (
                        "case_list_overlays_of",
                        f"{ws['name']}/{case_id}",
                        {"workspace_id": ws["id"], "case_id": case_id},
                    )
                )
            for name, key, params in calls:
                old = conn.execute(OLD_LOOKUPS[name], params).fetchall()
                new = conn.execute(queries[name], params).fetchall()
                if name == "case_list_live_targets":  # the query has no order
                    new = sorted(new, key=lambda r: r["case_id"])
                assert new == old, (name, params)
                seen[name][key] = new
    return seen


def _sync_into(server, token: str, workspace: str, dataset: str, cases: list[dict]) -> dict:
    path = f"/api/workspaces/{workspace}/datasets/{dataset}/sync"
    return admin_api(server, token, "POST", path, json={"cases": cases}).json()


def _overlay(case_id: str, target: str | None, note: str) -> dict:
    content: dict = {"input": {"question": f"{case_id}: {note}"}, "expected": {"answer": note}}
    if target is not None:
        content["overlay"] = target
    return {"id": case_id, "content": content}


def test_switched_queries_read_what_the_newest_version_lookup_reads(server, admin_token):
    """case_list_current_for_sync, case_list_in_dataset, case_list_live_targets,
    case_list_overlays_of and experiment_case_pins join each case to its marked version;
    after each writer (sync add, change, remove, restore; overlays that change or drop
    their target; a rejection; promotion with its overlays) they give what the newest-version
    lookup gives."""
    api = lambda method, path, **kw: admin_api(server, admin_token, method, path, **kw)  # noqa: E731
    for ws in ("dev", "prod"):
        api("POST", "/api/workspaces", json={"name": ws})
    api("PUT", "/api/workspaces/dev/promotion", json={"target": "prod"})
    for name in ("finance", "patches"):
        api("POST", "/api/workspaces/prod/datasets", json={"name": name})
    sync = lambda ds, cases: _sync_into(server, admin_token, "dev", ds, cases)  # noqa: E731
    check = lambda: _switched_match_old(server.db_url)  # noqa: E731

    a1 = _case("alpha", "1", tags=["math"], split="train")
    b1 = _case("beta", "2", tags=["eu"], split="test")
    c1 = _case("gamma", "3", tags=["billing"], split="train")
    assert sync("finance", [a1, b1, c1])["added"] == ["alpha", "beta", "gamma"]
    check()

    # overlays in another dataset: one per target
    pa1, pb1, pg1 = (
        _overlay("p-alpha", "alpha", "one"),
        _overlay("p-beta", "beta", "one"),
        _overlay("p-gamma", "gamma", "one"),
    )
    assert sync("patches", [pa1, pb1, pg1])["added"] == ["p-alpha", "p-beta", "p-gamma"]
    seen = check()
    assert [r["case_id"] for r in seen["case_list_overlays_of"]["dev/gamma"]] == ["p-gamma"]
    assert [r["case_id"] for r in seen["case_list_live_targets"]["dev/patches"]] == [
        "alpha",
        "beta",
        "gamma",
    ]

    # changed (alpha), removed (beta); the overlays change: p-alpha a new version, p-beta
    # removed with its target, p-gamma's new version no longer an overlay (its older one is)
    a2 = _case("alpha", "1.0", tags=["math"], split="train")
    out = sync("finance", [a2, c1])
    assert (out["changed"], out["removed"]) == (["alpha"], ["beta"])
    pa2, pg2 = _overlay("p-alpha", "alpha", "two"), _overlay("p-gamma", None, "two")
    out = sync("patches", [pa2, pg2])
    assert (out["changed"], out["removed"]) == (["p-alpha", "p-gamma"], ["p-beta"])
    seen = check()
    assert seen["case_list_overlays_of"]["dev/gamma"] == []
    assert seen["case_list_overlays_of"]["dev/beta"] == []
    assert [r["case_id"] for r in seen["case_list_live_targets"]["dev/patches"]] == [
        "alpha",
        "gamma",
    ]
    pins = {r["case_id"]: r for r in seen["experiment_case_pins"]["dev/patches"]}
    assert pins["p-alpha"]["target_content"]["expected"] == {"answer": "1.0"}
    assert pins["p-beta"]["removed"] and pins["p-gamma"]["target_version_id"] is None

    # the unchanged re-sync, then beta restored unchanged, removed again, restored changed,
    # and p-beta back on it
    assert sync("finance", [a2, c1])["unchanged"] == 2
    assert sync("finance", [a2, b1, c1])["restored"] == ["beta"]
    check()
    assert sync("finance", [a2, c1])["removed"] == ["beta"]
    check()
    b2 = _case("beta", "2.0", tags=["eu"], split="test")
    assert sync("finance", [a2, b2, c1])["restored"] == ["beta"]
    assert sync("patches", [pa2, pb1, pg2])["restored"] == ["p-beta"]
    seen = check()
    assert [r["case_id"] for r in seen["case_list_overlays_of"]["dev/beta"]] == ["p-beta"]

    # a rejected overlay is not promoted with its target
    api("POST", "/api/workspaces/dev/cases/p-alpha/reject", json={"comment": "no"})
    seen = check()
    assert seen["case_list_overlays_of"]["dev/alpha"] == []

    # promotion: beta's approved copy and its overlay's go to prod; alpha's alone
    promoted = api("POST", "/api/workspaces/dev/cases/beta/approve", json={}).json()["promoted"]
    assert sorted(p["case"] for p in promoted) == ["beta", "p-beta"]
    api("POST", "/api/workspaces/dev/cases/alpha/approve", json={})
    seen = check()
    prod_pins = {r["case_id"]: r for r in seen["experiment_case_pins"]["prod/patches"]}
    assert prod_pins["p-beta"]["target_content"]["expected"] == {"answer": "2.0"}

    # a new version of beta and its overlay promoted again; a repeat copies nothing
    b3 = _case("beta", "2.00", tags=["eu"], split="test")
    pb2 = _overlay("p-beta", "beta", "two")
    sync("finance", [a2, b3, c1])
    sync("patches", [pa2, pb2, pg2])
    api("POST", "/api/workspaces/dev/cases/beta/approve", json={})
    api("POST", "/api/workspaces/dev/cases/beta/approve", json={})
    seen = check()
    prod_pins = {r["case_id"]: r for r in seen["experiment_case_pins"]["prod/patches"]}
    assert prod_pins["p-beta"]["target_content"]["expected"] == {"answer": "2.00"}
    assert [(r["case_id"], r["version"]) for r in seen["case_list_in_dataset"]["prod/finance"]] == [
        ("alpha", 1),
        ("beta", 2),
    ]
