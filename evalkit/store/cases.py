"""Cases: listing, history, review decisions, comments, and promotion on approval."""

from __future__ import annotations

from typing import Any

import msgspec

from evalkit.auth.access import Actor
from evalkit.db import Conn
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import datasets as wire
from evalkit.store.datasets import dataset_id
from evalkit.store.workspaces import WorkspaceRow, get_workspace

_json = msgspec.json.Encoder()


async def list_cases(conn: Conn, ws: WorkspaceRow, dataset: str) -> list[wire.CaseSummary]:
    ds_id = await dataset_id(conn, ws, dataset)
    rows = await conn.all("case_list_in_dataset", dataset_id=ds_id)
    return [
        wire.CaseSummary(
            id=r["case_id"],
            dataset=dataset,
            version=r["version"],
            review_state=r["review_state"],
            removed=r["removed"],
            overlay_target=r["overlay_target"],
            source=r["source"],
            updated_at=r["created_at"],
        )
        for r in rows
    ]


async def _get_case(conn: Conn, ws: WorkspaceRow, case_id: str) -> dict[str, Any]:
    row = await conn.one("case_get", workspace_id=ws.id, case_id=case_id)
    if row is None:
        raise NotFound(
            f"no case {case_id!r} in @{ws.facts.name}; see `evalkit cases list DATASET@"
            f"{ws.facts.name}`",
            code="no-such-case",
        )
    return row


def case_version(v: dict[str, Any]) -> wire.CaseVersion:
    """A version row (``case_version_list`` and the queries shaped like it) as the wire has it."""
    return wire.CaseVersion(
        version=v["version"],
        content_hash=v["content_hash"],
        fixtures=v["fixtures"],
        review_state=v["review_state"],
        removed=v["removed"],
        overlay_target=v["overlay_target"],
        source=v["source"],
        created_at=v["created_at"],
        created_by=v["created_by"],
        promoted_from=(
            f"{v['promoted_case']}@{v['promoted_workspace']} v{v['promoted_version']}"
            if v["promoted_case"]
            else None
        ),
    )


async def show_case(conn: Conn, ws: WorkspaceRow, case_id: str) -> wire.CaseDetail:
    case = await _get_case(conn, ws, case_id)
    versions = await conn.all("case_version_list", case_pk=case["case_pk"])
    events = await conn.all("case_event_list", case_pk=case["case_pk"])
    return wire.CaseDetail(
        id=case_id,
        dataset=case["dataset"],
        workspace=ws.facts.name,
        content=versions[0]["content"] if versions else {},
        versions=[case_version(v) for v in versions],
        events=[
            wire.CaseEvent(
                kind=e["kind"],
                version=e["version"],
                actor=e["actor"],
                comment=e["comment"],
                branch=e["branch"],
                sha=e["sha"],
                at=e["created_at"],
                dirty=e["dirty"],
            )
            for e in events
        ],
    )


async def comment(
    conn: Conn, actor: Actor, ws: WorkspaceRow, case_id: str, text: str
) -> wire.Commented:
    case = await _get_case(conn, ws, case_id)
    versions = await conn.all("case_version_list", case_pk=case["case_pk"])
    await conn.execute(
        "case_event_insert",
        case_pk=case["case_pk"],
        version_id=versions[0]["version_id"] if versions else None,
        kind="comment",
        actor_id=actor.user_id,
        comment=text,
    )
    return wire.Commented(case=case_id, workspace=ws.facts.name)


async def review(
    conn: Conn,
    actor: Actor,
    ws: WorkspaceRow,
    case_id: str,
    decision: str,
    request: wire.ReviewRequest,
) -> wire.ReviewResult:
    """Approve or reject one version (default: the current one); approval promotes."""
    case = await _get_case(conn, ws, case_id)
    versions = await conn.all("case_version_list", case_pk=case["case_pk"])
    current = versions[0]
    if request.version is None:
        chosen = current
    else:
        found = [v for v in versions if v["version"] == request.version]
        if not found:
            raise NotFound(
                f"case {case_id}@{ws.facts.name} has no version {request.version} "
                f"(its current version is {current['version']})",
                code="no-such-version",
            )
        chosen = found[0]
    if chosen["removed"]:
        raise BadRequest(
            f"case {case_id}@{ws.facts.name} was removed by a sync; restore it (add its file "
            "back and sync) before deciding on it",
            code="case-removed",
        )
    state: wire.ReviewState = "approved" if decision == "approve" else "rejected"
    await conn.execute(
        "case_version_set_review", version_id=chosen["version_id"], review_state=state
    )
    await conn.execute(
        "case_event_insert",
        case_pk=case["case_pk"],
        version_id=chosen["version_id"],
        kind=decision,
        actor_id=actor.user_id,
        comment=request.comment,
    )
    promoted: list[wire.Promoted] = []
    if state == "approved" and ws.promotes_to is not None:
        target = await get_workspace(conn, actor, ws.promotes_to)
        promoted.append(await _promote(conn, actor, ws, target, case, chosen))
        overlays = await conn.all("case_list_overlays_of", workspace_id=ws.id, case_id=case_id)
        for overlay in overlays:
            rows = await conn.all("case_version_list", case_pk=overlay["case_pk"])
            promoted.append(
                await _promote(
                    conn,
                    actor,
                    ws,
                    target,
                    {
                        "case_pk": overlay["case_pk"],
                        "case_id": overlay["case_id"],
                        "dataset": overlay["dataset"],
                    },
                    rows[0],
                )
            )
    return wire.ReviewResult(
        case=case_id,
        workspace=ws.facts.name,
        version=chosen["version"],
        review_state=state,
        promoted=promoted,
    )


async def _promote(
    conn: Conn,
    actor: Actor,
    source: WorkspaceRow,
    target: WorkspaceRow,
    case: dict[str, Any],
    version: dict[str, Any],
) -> wire.Promoted:
    """Add ``version`` of ``case``, approved, to the same-named dataset of ``target``."""
    src_name, tgt_name, dataset = source.facts.name, target.facts.name, case["dataset"]
    row = await conn.one("dataset_get_id", workspace_id=target.id, name=dataset)
    if row is None:
        raise Conflict(
            f"approving {case['case_id']}@{src_name} promotes it to @{tgt_name}, which has no "
            f"dataset {dataset!r}: create it once with `evalkit datasets create "
            f"{dataset}@{tgt_name}`, then approve again (nothing was changed)",
            code="promotion-dataset-missing",
        )
    ds_id = int(row["id"])
    existing = await conn.one("case_get", workspace_id=target.id, case_id=case["case_id"])
    origin = f"from {case['case_id']}@{src_name} v{version['version']}"
    if existing is not None and existing["dataset_id"] != ds_id:
        raise Conflict(
            f"cannot promote {case['case_id']}@{src_name} into {dataset}@{tgt_name}: "
            f"@{tgt_name} has that case id in dataset {existing['dataset']!r}",
            code="case-id-taken",
        )
    if existing is None:
        rows = await conn.all(
            "case_insert_many",
            workspace_id=target.id,
            dataset_id=ds_id,
            case_ids=_json.encode([case["case_id"]]).decode(),
        )
        case_pk, number = rows[0]["case_pk"], 1
        version_id = await _insert_approved_copy(conn, actor, case_pk, number, version)
    else:
        case_pk = existing["case_pk"]
        latest = (await conn.all("case_version_list", case_pk=case_pk))[0]
        if latest["version_hash"] == version["version_hash"]:
            number, version_id = latest["version"], latest["version_id"]
            await conn.execute("case_version_set_approved_restored", version_id=version_id)
        else:
            number = latest["version"] + 1
            version_id = await _insert_approved_copy(conn, actor, case_pk, number, version)
    await conn.execute(
        "case_event_insert",
        case_pk=case_pk,
        version_id=version_id,
        kind="promotion",
        actor_id=actor.user_id,
        comment=origin,
    )
    return wire.Promoted(case=case["case_id"], dataset=dataset, workspace=tgt_name, version=number)


async def _insert_approved_copy(
    conn: Conn, actor: Actor, case_pk: int, number: int, version: dict[str, Any]
) -> int:
    """A new version ``number`` of ``case_pk`` with the content of ``version``, approved."""
    copy = {
        "case_pk": case_pk,
        "version": number,
        "content": version["content"],
        "content_hash": version["content_hash"],
        "fixtures": version["fixtures"],
        "version_hash": version["version_hash"],
        "overlay_target": version["overlay_target"],
        "source": version["source"],
        "review_state": "approved",
        "promoted_from": version["version_id"],
    }
    inserted = await conn.all(
        "case_version_insert_many", actor_id=actor.user_id, rows=_json.encode([copy]).decode()
    )
    return int(inserted[0]["version_id"])
