"""Datasets, fixtures and sync: the one place that turns a suite into case versions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from evalkit.auth.access import Actor
from evalkit.cases.model import CASE_ID_RE, CASE_ID_RULE, content_hash, version_hash
from evalkit.db import Conn
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import datasets as wire
from evalkit.model.names import check_name
from evalkit.store.accounts import get_user
from evalkit.store.evaluators import evaluator_names
from evalkit.store.workspaces import WorkspaceRow

_json = msgspec.json.Encoder()


def _dataset_from_row(row: dict[str, Any]) -> wire.Dataset:
    last = None
    if row["last_sync_at"] is not None:
        last = wire.LastSync(
            at=row["last_sync_at"],
            branch=row["last_sync_branch"],
            sha=row["last_sync_sha"],
            actor=row["last_sync_actor"],
            dirty=row["last_sync_dirty"],
        )
    return wire.Dataset(
        name=row["name"],
        workspace=row["workspace"],
        created_at=row["created_at"],
        cases=row["cases"],
        review=wire.ReviewCounts(
            pending=row["pending"],
            approved=row["approved"],
            rejected=row["rejected"],
            removed=row["removed"],
        ),
        last_sync=last,
    )


def _no_dataset(ws: WorkspaceRow, name: str) -> NotFound:
    return NotFound(
        f"no dataset {name}@{ws.facts.name}: sync a suite named {name} into @{ws.facts.name}, "
        f"or create it with `evalkit datasets create {name}@{ws.facts.name}`",
        code="no-such-dataset",
    )


async def create_dataset(conn: Conn, actor: Actor, ws: WorkspaceRow, name: str) -> wire.Dataset:
    check_name("dataset", name)
    row = await conn.one("dataset_insert", workspace_id=ws.id, name=name, actor_id=actor.user_id)
    if row is None:
        raise Conflict(
            f"dataset {name}@{ws.facts.name} already exists; "
            f"see `evalkit datasets show {name}@{ws.facts.name}`",
            code="dataset-exists",
        )
    return await get_dataset(conn, ws, name)


async def get_dataset(conn: Conn, ws: WorkspaceRow, name: str) -> wire.Dataset:
    rows = await conn.all("dataset_list", workspace_id=ws.id, name=name)
    if not rows:
        raise _no_dataset(ws, name)
    return _dataset_from_row(rows[0])


async def dataset_id(conn: Conn, ws: WorkspaceRow, name: str) -> int:
    row = await conn.one("dataset_get_id", workspace_id=ws.id, name=name)
    if row is None:
        raise _no_dataset(ws, name)
    return int(row["id"])


async def list_datasets(conn: Conn, ws: WorkspaceRow | None) -> list[wire.Dataset]:
    rows = await conn.all("dataset_list", workspace_id=ws.id if ws else None, name=None)
    return [_dataset_from_row(row) for row in rows]


# --------------------------------------------------------------------------- fixtures


async def missing_fixtures(conn: Conn, sha256s: list[str]) -> list[str]:
    known = {r["sha256"] for r in await conn.all("fixture_list_known", sha256s=sha256s)}
    return sorted(set(sha256s) - known)


async def record_fixture(conn: Conn, actor: Actor, sha256: str, size: int, blob_key: str) -> bool:
    """Record stored bytes; False when the server knew them already."""
    row = await conn.one(
        "fixture_insert", sha256=sha256, size=size, blob_key=blob_key, actor_id=actor.user_id
    )
    return row is not None


# --------------------------------------------------------------------------- lint


async def known_custom_evaluators(conn: Conn, ws: WorkspaceRow, names: list[str]) -> set[str]:
    """The given custom evaluator names the workspace has a remote evaluator for."""
    return await evaluator_names(conn, ws.id, names)


async def ids_taken_elsewhere(
    conn: Conn, ws: WorkspaceRow, case_ids: list[str], dataset_id: int
) -> dict[str, str]:
    """Case ids of ``case_ids`` that another dataset of the workspace uses -> that dataset."""
    rows = await conn.all(
        "case_list_taken", workspace_id=ws.id, case_ids=case_ids, dataset_id=dataset_id
    )
    return {r["case_id"]: r["dataset"] for r in rows}


async def missing_overlay_targets(
    conn: Conn, ws: WorkspaceRow, targets: list[str], dataset_id: int
) -> list[str]:
    """Overlay targets that are not live cases of another dataset of the workspace."""
    live = await conn.all(
        "case_list_live_targets", workspace_id=ws.id, case_ids=targets, dataset_id=dataset_id
    )
    return sorted(set(targets) - {r["case_id"] for r in live})


async def lint_check(conn: Conn, ws: WorkspaceRow, query: wire.LintQuery) -> wire.LintAnswer:
    taken: dict[str, str] = {}
    missing: list[str] = []
    if query.dataset is not None:
        row = await conn.one("dataset_get_id", workspace_id=ws.id, name=query.dataset)
        own_id = row["id"] if row else -1  # a dataset not synced yet owns no case id
        taken = await ids_taken_elsewhere(conn, ws, query.case_ids, own_id)
        missing = await missing_overlay_targets(conn, ws, query.overlay_targets, own_id)
    known = await known_custom_evaluators(conn, ws, query.custom_evaluators)
    unknown = sorted(set(query.custom_evaluators) - known)
    return wire.LintAnswer(taken=taken, missing_targets=missing, unknown_custom_evaluators=unknown)


# --------------------------------------------------------------------------- sync


def _check_id(case_id: str, seen: set[str]) -> None:
    if not CASE_ID_RE.match(case_id):
        raise BadRequest(
            f"case id {case_id!r} is not valid: use {CASE_ID_RULE}", code="bad-case-id"
        )
    if case_id in seen:
        raise BadRequest(
            f"case id {case_id!r} appears twice in this sync", code="duplicate-case-id"
        )
    seen.add(case_id)


def _check_cases(cases: list[wire.SyncCase], seen: set[str]) -> list[dict[str, Any]]:
    """Validate the cases of a sync request and compute their hashes."""
    prepared: list[dict[str, Any]] = []
    for case in cases:
        _check_id(case.id, seen)
        overlay = case.content.get("overlay")
        if overlay is not None and not isinstance(overlay, str):
            raise BadRequest(f"case {case.id}: `overlay` must be a case id", code="bad-case")
        if overlay == case.id:
            raise BadRequest(f"case {case.id} is an overlay on itself", code="bad-case")
        inputs = case.content.get("input")
        files = inputs.get("files") if isinstance(inputs, dict) else None
        keys = {str(k) for k in files} if isinstance(files, list) else set()
        if keys != set(case.fixtures):
            raise BadRequest(
                f"case {case.id}: `fixtures` must pin exactly the keys under input.files "
                f"({sorted(keys)}), got {sorted(case.fixtures)}",
                code="bad-case",
            )
        fixtures = {key: msgspec.structs.asdict(pin) for key, pin in sorted(case.fixtures.items())}
        chash = content_hash(case.content)
        prepared.append(
            {
                "id": case.id,
                "source": case.source,
                "content": case.content,
                "content_hash": chash,
                "fixtures": fixtures,
                "overlay_target": overlay,
                "version_hash": version_hash(chash, fixtures),
            }
        )
    return prepared


async def _sync_actor(conn: Conn, actor: Actor, as_user: str | None) -> tuple[int, str]:
    if as_user is None or as_user == actor.username:
        assert actor.user_id is not None and actor.username is not None
        return actor.user_id, actor.username
    user = await get_user(conn, as_user)
    return int(user["id"]), str(user["username"])


async def sync_dataset(
    conn: Conn, actor: Actor, ws: WorkspaceRow, name: str, request: wire.SyncRequest
) -> wire.SyncResult:
    """Apply a suite to a dataset; the caller holds one transaction around it."""
    check_name("dataset", name)
    seen: set[str] = set()
    cases = _check_cases(request.cases, seen)
    for ref in request.known:
        _check_id(ref.id, seen)
    actor_id, actor_name = await _sync_actor(conn, actor, request.actor)

    created = (
        await conn.one("dataset_insert", workspace_id=ws.id, name=name, actor_id=actor_id)
        is not None
    )
    locked = await conn.one("dataset_lock", workspace_id=ws.id, name=name)
    assert locked is not None
    ds_id = int(locked["id"])
    current = {
        r["case_id"]: r for r in await conn.all("case_list_current_for_sync", dataset_id=ds_id)
    }
    known_rows = _known_rows(ws, name, request.known, current)
    ids = [c["id"] for c in cases] + [k.id for k in request.known]
    await _refuse_missing_fixtures(conn, cases)
    # case ids are unique within a workspace (cases_workspace_case_id_key): the ids this
    # dataset holds already are nobody else's
    await _refuse_ids_taken(conn, ws, ds_id, [cid for cid in ids if cid not in current])
    await _refuse_missing_overlay_targets(conn, ws, ds_id, cases, known_rows)

    plan = _SyncPlan.of(cases, current, unchanged=len(known_rows))
    incoming = set(ids)
    removed_rows = [
        r for cid, r in sorted(current.items()) if cid not in incoming and not r["removed"]
    ]
    events = await _write_versions(conn, ws, ds_id, actor_id, cases, plan)
    events.extend(await _set_removed(conn, plan.restore_only, removed=False))
    events.extend(await _set_removed(conn, removed_rows, removed=True))
    if events:
        await conn.execute(
            "case_event_insert_many",
            actor_id=actor_id,
            branch=request.branch,
            sha=request.sha,
            dirty=request.dirty,
            rows=_json.encode(events).decode(),
        )
    await conn.execute(
        "dataset_set_last_sync",
        id=ds_id,
        branch=request.branch,
        sha=request.sha,
        dirty=request.dirty,
        actor_id=actor_id,
    )

    custom = {name for c in cases for name in _custom_names(c["content"])}
    custom.update(name for r in known_rows for name in r["custom_names"] or ())
    registered = await known_custom_evaluators(conn, ws, sorted(custom))
    return wire.SyncResult(
        dataset=name,
        workspace=ws.facts.name,
        created=created,
        added=sorted(plan.added),
        changed=sorted(plan.changed),
        restored=sorted(plan.restored),
        removed=[r["case_id"] for r in removed_rows],
        unchanged=plan.unchanged,
        branch=request.branch,
        sha=request.sha,
        actor=actor_name,
        dirty=request.dirty,
        unknown_custom_evaluators=[n for n in sorted(custom) if n not in registered],
        known=len(known_rows),
    )


async def _refuse_missing_fixtures(conn: Conn, cases: list[dict[str, Any]]) -> None:
    shas = sorted({pin["sha256"] for c in cases for pin in c["fixtures"].values()})
    missing = await missing_fixtures(conn, shas) if shas else []
    if missing:
        raise BadRequest(
            f"{len(missing)} fixture(s) are not on the server (first {missing[0]}): "
            "upload their bytes before the sync (`evalkit sync` does this)",
            code="fixture-missing",
        )


async def _refuse_ids_taken(conn: Conn, ws: WorkspaceRow, ds_id: int, fresh: list[str]) -> None:
    """Refuses ids new to the dataset that another dataset of the workspace holds."""
    taken = await ids_taken_elsewhere(conn, ws, fresh, ds_id) if fresh else {}
    if taken:
        listed = ", ".join(f"{cid} (in {ds})" for cid, ds in sorted(taken.items())[:5])
        raise Conflict(
            f"case ids are unique within @{ws.facts.name}, and {len(taken)} of this suite's "
            f"are used by another dataset: {listed}; rename those cases",
            code="case-id-taken",
        )


async def _refuse_missing_overlay_targets(
    conn: Conn,
    ws: WorkspaceRow,
    ds_id: int,
    cases: list[dict[str, Any]],
    known_rows: list[dict[str, Any]],
) -> None:
    overlays = [(c["id"], c["overlay_target"]) for c in cases]
    overlays += [(r["case_id"], r["overlay_target"]) for r in known_rows]
    targets = sorted({target for _, target in overlays if target})
    missing = await missing_overlay_targets(conn, ws, targets, ds_id) if targets else []
    if missing:
        users = [cid for cid, target in overlays if target in missing]
        raise BadRequest(
            f"overlay target(s) {', '.join(missing)} are not cases of another "
            f"dataset of @{ws.facts.name} (used by {', '.join(users[:5])}): sync the "
            "target's dataset first, or fix `overlay:`",
            code="overlay-target-missing",
        )


@dataclass
class _SyncPlan:
    """What a sync does to each case the suite sends in full, against the dataset's cases."""

    versions: list[tuple[str, dict[str, Any], int | None, int]] = field(default_factory=list)
    """(kind, case, its pk, the new version's number) of each case changed or restored."""
    restore_only: list[dict[str, Any]] = field(default_factory=list)
    """Removed cases sent back unchanged: only their removal is undone."""
    added: list[str] = field(default_factory=list)
    """New to the dataset: each gets a case row, then its first version."""
    changed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    unchanged: int = 0

    @classmethod
    def of(
        cls, cases: list[dict[str, Any]], current: dict[str, dict[str, Any]], *, unchanged: int
    ) -> _SyncPlan:
        plan = cls(unchanged=unchanged)
        for case in cases:
            cur = current.get(case["id"])
            if cur is None:
                plan.added.append(case["id"])
            elif cur["version_hash"] != case["version_hash"]:
                kind = "restore" if cur["removed"] else "change"
                plan.versions.append((kind, case, cur["case_pk"], cur["version"] + 1))
                (plan.restored if cur["removed"] else plan.changed).append(case["id"])
            elif cur["removed"]:
                plan.restore_only.append(cur)
                plan.restored.append(case["id"])
            else:
                plan.unchanged += 1
        return plan


async def _write_versions(
    conn: Conn,
    ws: WorkspaceRow,
    ds_id: int,
    actor_id: int | None,
    cases: list[dict[str, Any]],
    plan: _SyncPlan,
) -> list[dict[str, Any]]:
    """Insert the new cases, then a version of each case added, changed or restored; the
    events that record them."""
    versions = list(plan.versions)
    if plan.added:
        rows = await conn.all(
            "case_insert_many",
            workspace_id=ws.id,
            dataset_id=ds_id,
            case_ids=_json.encode(plan.added).decode(),
        )
        pks = {r["case_id"]: r["case_pk"] for r in rows}
        by_id = {c["id"]: c for c in cases}
        versions.extend(("add", by_id[cid], pks[cid], 1) for cid in plan.added)
    if not versions:
        return []
    rows = [
        {
            "case_pk": pk,
            "version": number,
            "content": case["content"],
            "content_hash": case["content_hash"],
            "fixtures": case["fixtures"],
            "version_hash": case["version_hash"],
            "overlay_target": case["overlay_target"],
            "source": case["source"],
            "review_state": "pending",
            "promoted_from": None,
        }
        for _, case, pk, number in versions
    ]
    inserted = await conn.all(
        "case_version_insert_many", actor_id=actor_id, rows=_json.encode(rows).decode()
    )
    version_ids = {(r["case_pk"], r["version"]): r["version_id"] for r in inserted}
    return [
        {"case_pk": pk, "version_id": version_ids[(pk, number)], "kind": kind, "comment": None}
        for kind, _, pk, number in versions
    ]


def _known_rows(
    ws: WorkspaceRow, name: str, known: list[wire.KnownCase], current: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The current versions that the cases sent by hash name; refused unless each is live
    and has that hash (then the client's record of the dataset is out of date)."""
    rows: list[dict[str, Any]] = []
    stale: list[str] = []
    for case in known:
        row = current.get(case.id)
        if row is None or row["removed"] or row["version_hash"] != case.version_hash:
            stale.append(case.id)
        else:
            rows.append(row)
    if stale:
        raise Conflict(
            f"{len(stale)} case(s) sent by version hash alone are not the current version of "
            f"{name}@{ws.facts.name} (first: {stale[0]}); another sync changed them since: "
            "send their content (`evalkit sync` does this by itself)",
            code="known-case-stale",
        )
    return rows


async def _set_removed(
    conn: Conn, rows: list[dict[str, Any]], *, removed: bool
) -> list[dict[str, Any]]:
    """Flag the current versions in ``rows`` removed (or restored); returns their events."""
    if not rows:
        return []
    await conn.execute(
        "case_version_set_removed_many",
        removed=removed,
        version_ids=[r["version_id"] for r in rows],
    )
    kind = "remove" if removed else "restore"
    return [
        {"case_pk": r["case_pk"], "version_id": r["version_id"], "kind": kind, "comment": None}
        for r in rows
    ]


def _custom_names(content: dict[str, Any]) -> list[str]:
    evaluators = content.get("evaluators")
    custom = evaluators.get("custom") if isinstance(evaluators, dict) else None
    return [str(name) for name in custom] if isinstance(custom, dict) else []
