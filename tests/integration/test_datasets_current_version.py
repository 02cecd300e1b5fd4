"""cases.current_version, the mark of each case's current version: every writer keeps it at
the case's highest version number (sync adding, changing, removing, restoring; a review
decision; promotion's approved copy), the migration backfills it, and the case search reads
the same cases through it as the lookup of the newest version did."""

from __future__ import annotations

import httpx
import psycopg
from alembic import command

from evalkit.sql import migrate
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
