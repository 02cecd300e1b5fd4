"""``evalkit datasets ...`` and ``evalkit cases ...``: what the server holds, and review."""

from __future__ import annotations

import json as jsonlib
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import DIRTY, emit_json, say, source_ref, table
from evalkit.model import datasets as wire

datasets = App(name="datasets", help="Datasets: the server-side copy of a suite of cases.")
cases = App(name="cases", help="Cases of a dataset: versions, changelog, review.")

DatasetRef = Annotated[str, Parameter(help="NAME@WORKSPACE, or NAME for your personal one.")]
CaseRef = Annotated[str, Parameter(help="CASE_ID@WORKSPACE, or CASE_ID for your personal one.")]


# --------------------------------------------------------------------------- datasets


@datasets.command(name="create")
def datasets_create(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """Create an empty dataset. Needed once per dataset in a promotion target (sync creates
    datasets elsewhere)."""
    with Client() as client:
        resolved = client.resolve(ref, "dataset")
        created: wire.Dataset = client.post(
            f"/api/workspaces/{resolved.workspace}/datasets",
            wire.DatasetCreate(name=resolved.name),
            type=wire.Dataset,
        )
    if json:
        emit_json(created)
    else:
        say(f"created dataset {created.name}@{created.workspace}")
    return 0


@datasets.command(name="list")
def datasets_list(
    *,
    workspace: Annotated[str | None, Parameter(help="Only this workspace's datasets.")] = None,
    json: JsonFlag = False,
) -> int:
    """List datasets (of every workspace, or of one) with their case counts."""
    path = f"/api/workspaces/{workspace}/datasets" if workspace else "/api/datasets"
    with Client() as client:
        rows: list[wire.Dataset] = client.get(path, type=list[wire.Dataset])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                f"{d.name}@{d.workspace}",
                d.cases,
                d.review.pending,
                d.review.approved,
                d.review.rejected,
                d.review.removed,
                d.last_sync.at if d.last_sync else None,
                _sync_origin(d.last_sync) if d.last_sync else None,
            )
            for d in rows
        ],
        ["dataset", "cases", "pending", "approved", "rejected", "removed", "last sync", "from"],
    )
    return 0


def _sync_origin(last: wire.LastSync) -> str:
    return f"{source_ref(last.branch, last.sha, dirty=last.dirty)} by {last.actor or '?'}"


@datasets.command(name="show")
def datasets_show(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """Show a dataset: its last sync (branch, commit, who) and cases by review state."""
    with Client() as client:
        resolved = client.resolve(ref, "dataset")
        ds: wire.Dataset = client.get(
            f"/api/workspaces/{resolved.workspace}/datasets/{resolved.name}", type=wire.Dataset
        )
    if json:
        emit_json(ds)
        return 0
    say(f"{ds.name}@{ds.workspace}: {ds.cases} cases")
    say(
        f"review: {ds.review.pending} pending, {ds.review.approved} approved, "
        f"{ds.review.rejected} rejected; {ds.review.removed} removed"
    )
    if ds.last_sync:
        ls = ds.last_sync
        say(
            f"last sync: {ls.at.isoformat(timespec='seconds')} by {ls.actor or '?'}, "
            f"branch {ls.branch or '-'}, commit {ls.sha or '-'}"
            + (f", {DIRTY}" if ls.dirty else "")
        )
    else:
        say("last sync: never")
    return 0


# --------------------------------------------------------------------------- cases


@cases.command(name="list")
def cases_list(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """List the cases of a dataset with their current version and review state."""
    with Client() as client:
        resolved = client.resolve(ref, "dataset")
        rows: list[wire.CaseSummary] = client.get(
            f"/api/workspaces/{resolved.workspace}/datasets/{resolved.name}/cases",
            type=list[wire.CaseSummary],
        )
    if json:
        emit_json(rows)
        return 0
    table(
        [(c.id, c.version, c.review_state, c.removed, c.overlay_target, c.source) for c in rows],
        ["case", "version", "review", "removed", "overlay on", "file"],
    )
    return 0


@cases.command(name="show")
def cases_show(ref: CaseRef, /, *, json: JsonFlag = False) -> int:
    """Show a case: its current content, every version, and its changelog."""
    with Client() as client:
        resolved = client.resolve(ref, "case")
        case: wire.CaseDetail = client.get(
            f"/api/workspaces/{resolved.workspace}/cases/{resolved.name}", type=wire.CaseDetail
        )
    if json:
        emit_json(case)
        return 0
    say(f"{case.id}@{case.workspace} (dataset {case.dataset})")
    say(jsonlib.dumps(case.content, indent=2, ensure_ascii=False))
    say()
    table(
        [
            (
                v.version,
                v.review_state,
                v.removed,
                v.content_hash[:12],
                v.created_by,
                v.created_at,
                v.promoted_from,
            )
            for v in case.versions
        ],
        ["version", "review", "removed", "hash", "by", "at", "promoted from"],
    )
    say()
    table(
        [(e.at, e.kind, e.version, e.actor, _event_detail(e)) for e in case.events],
        ["at", "event", "version", "by", "detail"],
    )
    return 0


def _event_detail(event: wire.CaseEvent) -> str | None:
    parts = []
    if event.branch or event.sha:
        parts.append(source_ref(event.branch, event.sha, dirty=event.dirty))
    if event.comment:
        parts.append(event.comment)
    return " ".join(parts) or None


CommentOpt = Annotated[str | None, Parameter(help="Say why, in the changelog.")]
VersionOpt = Annotated[int | None, Parameter(help="The version to decide on (default: current).")]


def _decide(ref: str, decision: str, comment: str | None, version: int | None, json: bool) -> int:
    with Client() as client:
        resolved = client.resolve(ref, "case")
        result: wire.ReviewResult = client.post(
            f"/api/workspaces/{resolved.workspace}/cases/{resolved.name}/{decision}",
            wire.ReviewRequest(comment=comment, version=version),
            type=wire.ReviewResult,
        )
    if json:
        emit_json(result)
        return 0
    say(f"{result.review_state} {result.case}@{result.workspace} v{result.version}")
    for p in result.promoted:
        say(f"  promoted {p.case} to {p.dataset}@{p.workspace} (v{p.version}, approved)")
    return 0


@cases.command(name="approve")
def cases_approve(
    ref: CaseRef,
    /,
    *,
    comment: CommentOpt = None,
    version: VersionOpt = None,
    json: JsonFlag = False,
) -> int:
    """Approve a case (reviewers and admins of a shared workspace). In a workspace linked with
    `workspaces promote-to`, this adds the version, approved, with its overlays, to the
    target's same-named dataset."""
    return _decide(ref, "approve", comment, version, json)


@cases.command(name="reject")
def cases_reject(
    ref: CaseRef,
    /,
    *,
    comment: CommentOpt = None,
    version: VersionOpt = None,
    json: JsonFlag = False,
) -> int:
    """Reject a case (reviewers and admins of a shared workspace). Review never filters runs."""
    return _decide(ref, "reject", comment, version, json)


@cases.command(name="comment")
def cases_comment(
    ref: CaseRef,
    text: Annotated[str, Parameter(help="The comment.")],
    /,
) -> int:
    """Comment on a case (anyone logged in, promotion targets included)."""
    with Client() as client:
        resolved = client.resolve(ref, "case")
        client.post(
            f"/api/workspaces/{resolved.workspace}/cases/{resolved.name}/comments",
            wire.CommentRequest(text=text),
            type=wire.Commented,
        )
    say(f"commented on {resolved}")
    return 0


# Commands of this group that live in other modules, imported when they run.
cases.command("evalkit.cli.cases_mining:cases_from_session", name="from-session")
cases.command("evalkit.cli.cases_mining:cases_mine", name="mine")
