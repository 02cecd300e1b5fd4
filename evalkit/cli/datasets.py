"""``evalkit lint``, ``evalkit sync``, ``evalkit datasets ...`` and ``evalkit cases ...``."""

from __future__ import annotations

import json as jsonlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
from cyclopts import App, Parameter

from evalkit.cases import (
    LintFinding,
    ProjectConfig,
    ProjectError,
    ProjectNotFound,
    SuiteError,
    format_report,
    load_project,
    load_suite,
)
from evalkit.cases.lint import analyze
from evalkit.cli.app import JsonFlag, app
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import api
from evalkit.model import datasets as wire
from evalkit.model.names import Ref, parse_ref

datasets = App(name="datasets", help="Datasets: the server-side copy of a suite of cases.")
app.command(datasets)
cases = App(name="cases", help="Cases of a dataset: versions, changelog, review.")
app.command(cases)

SuiteDir = Annotated[Path, Parameter(help="The suite directory; its name is the dataset name.")]
DatasetRef = Annotated[str, Parameter(help="NAME@WORKSPACE, or NAME for your personal one.")]
CaseRef = Annotated[str, Parameter(help="CASE_ID@WORKSPACE, or CASE_ID for your personal one.")]
_CHUNK = 1 << 20


def _personal(client: Client) -> str:
    me: api.WhoAmI = client.get("/api/auth/whoami", type=api.WhoAmI)
    return me.personal_workspace


def _resolve(client: Client, text: str, what: str) -> Ref:
    try:
        ref = parse_ref(text, what)
    except Exception as exc:  # BadRequest from parse_ref
        raise CliError(str(exc), exit_code=2) from None
    return ref if ref.workspace else ref.resolve(_personal(client))


def _project(directory: Path) -> ProjectConfig | None:
    try:
        return load_project(directory)
    except ProjectNotFound:
        return None
    except ProjectError as exc:
        raise CliError(exc.message) from None


# --------------------------------------------------------------------------- lint


@app.command(name="lint")
def lint(
    directory: SuiteDir,
    /,
    *,
    dataset: Annotated[
        str | None,
        Parameter(
            help="The dataset this suite syncs into (NAME@WORKSPACE): check case ids and "
            "overlay targets against the workspace's other datasets."
        ),
    ] = None,
    offline: Annotated[bool, Parameter(help="Only the checks that need no server.")] = False,
    json: JsonFlag = False,
) -> int:
    """Check a suite: errors (E-...) and warnings (W-...), one line each; exit 1 on errors.

    Without --offline, lint also asks the server (it needs a login) about unknown custom
    evaluators and, with --dataset, about case ids and overlay targets.
    """
    project = _project(directory)
    analysis = analyze(directory, project)
    report = analysis.report
    if not offline and directory.is_dir():
        report.findings.extend(_online_findings(analysis, dataset))
        report.findings.sort(key=lambda f: (f.file, f.line or 0, f.code))
    if json:
        emit_json(
            {
                "dataset": report.dataset,
                "ok": report.ok,
                "errors": len(report.errors),
                "warnings": len(report.warnings),
                "findings": report.findings,
            }
        )
    else:
        say(format_report(report))
    return report.exit_code


def _online_findings(analysis: Any, dataset: str | None) -> list[LintFinding]:
    report = analysis.report
    with Client() as client:
        ref = _resolve(client, dataset or report.dataset, "dataset")
        answer: wire.LintAnswer = client.post(
            f"/api/workspaces/{ref.workspace}/lint",
            wire.LintQuery(
                dataset=ref.name if dataset else None,
                case_ids=report.case_ids,
                overlay_targets=sorted(report.overlay_targets),
                custom_evaluators=sorted(report.custom_evaluators),
            ),
            type=wire.LintAnswer,
        )
    found: list[LintFinding] = []
    for case in analysis.ids:
        other = answer.taken.get(case.id)
        if other is not None:
            found.append(
                LintFinding(
                    code="E-CASE-ID-TAKEN",
                    severity="error",
                    file=case.file,
                    line=case.id_line or 1,
                    message=f"case id {case.id!r} is already a case of dataset {other}@"
                    f"{ref.workspace}: case ids are unique within a workspace; rename it",
                )
            )
    for target in answer.missing_targets:
        for loc in report.overlay_targets.get(target, []):
            found.append(
                LintFinding(
                    code="E-OVERLAY-TARGET",
                    severity="error",
                    file=loc.file,
                    line=loc.line,
                    message=f"overlay target {target!r} is no case of another dataset of "
                    f"@{ref.workspace}: sync the target's dataset first, or fix `overlay:`",
                )
            )
    for name in answer.unknown_custom_evaluators:
        for loc in report.custom_evaluators.get(name, []):
            found.append(
                LintFinding(
                    code="W-CUSTOM-UNKNOWN",
                    severity="warning",
                    file=loc.file,
                    line=loc.line,
                    message=f"@{ref.workspace} has no remote evaluator named {name!r}: register "
                    "it, or pass a Python evaluator of that name to run_experiment",
                )
            )
    return found


# --------------------------------------------------------------------------- sync


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _read_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


@app.command(name="sync")
def sync(
    directory: SuiteDir,
    /,
    *,
    workspace: Annotated[
        str | None, Parameter(help="Target workspace (default: your personal one).")
    ] = None,
    actor: Annotated[
        str | None, Parameter(help="Record this user in the changelog (admins only).")
    ] = None,
    branch: Annotated[str | None, Parameter(help="Git branch to record (default: git's).")] = None,
    sha: Annotated[str | None, Parameter(help="Commit sha to record (default: git's).")] = None,
    json: JsonFlag = False,
) -> int:
    """Sync a suite into the dataset named after its directory.

    Uploads only fixture bytes the server lacks, adds a new version only for changed cases,
    soft-removes cases whose files are gone, and records the git branch and commit.
    """
    started = time.monotonic()
    project = _project(directory)
    try:
        suite = load_suite(directory, project)
    except SuiteError as exc:
        note(format_report(exc.report))
        raise CliError(f"{exc.report.dataset}: fix the errors above before syncing") from None
    for warning in suite.warnings:
        note(f"{warning.file}:{warning.line or ''}: {warning.code} {warning.message}")
    branch = branch or _git(directory, "rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":
        branch = None
    sha = sha or _git(directory, "rev-parse", "HEAD")
    with Client() as client:
        ws = workspace or _personal(client)
        base = f"/api/workspaces/{ws}"
        note(f"{suite.name}@{ws}: {len(suite.cases)} cases, {len(suite.fixtures)} fixtures")
        used = {key for case in suite.cases for key in case.fixture_keys}
        fixtures = {key: ref for key, ref in suite.fixtures.items() if key in used}
        by_sha = {ref.sha256: ref for ref in fixtures.values()}
        uploaded, uploaded_bytes = 0, 0
        if by_sha:
            answer: wire.FixtureMissing = client.post(
                f"{base}/fixtures/missing",
                wire.FixtureQuery(sha256=sorted(by_sha)),
                type=wire.FixtureMissing,
            )
            too_big = [by_sha[d] for d in answer.missing if by_sha[d].size > answer.max_bytes]
            if too_big:
                raise CliError(
                    f"fixture {too_big[0].key} ({too_big[0].path}) is {too_big[0].size} bytes, "
                    f"over this server's limit of {answer.max_bytes} bytes: shrink the file, or "
                    "ask the server's admin to raise max_fixture_bytes [fixture-too-large]"
                )
            for number, digest in enumerate(answer.missing, 1):
                ref = by_sha[digest]
                note(
                    f"uploading fixture {number}/{len(answer.missing)}: {ref.key} "
                    f"({_megabytes(ref.size)})"
                )
                _upload(client, f"{base}/fixtures/{digest}", ref.path, ref.size)
                uploaded += 1
                uploaded_bytes += ref.size
        request = wire.SyncRequest(
            cases=[
                wire.SyncCase(
                    id=case.id,
                    source=case.source,
                    content=case.content,
                    fixtures={
                        key: wire.FixturePin(
                            sha256=fixtures[key].sha256,
                            size=fixtures[key].size,
                            context=fixtures[key].context,
                        )
                        for key in case.fixture_keys
                    },
                )
                for case in suite.cases
            ],
            branch=branch,
            sha=sha,
            actor=actor,
        )
        note(f"sending {len(suite.cases)} cases")
        result: wire.SyncResult = client.post(
            f"{base}/datasets/{suite.name}/sync", request, type=wire.SyncResult
        )
    for name in result.unknown_custom_evaluators:
        note(
            f"W-CUSTOM-UNKNOWN @{ws} has no remote evaluator named {name!r} (expected for a "
            "Python evaluator)"
        )
    if json:
        out = msgspec.structs.asdict(result)
        out |= {
            "fixtures_uploaded": uploaded,
            "fixture_bytes_uploaded": uploaded_bytes,
            "fixtures_on_server": len(by_sha) - uploaded,
            "seconds": round(time.monotonic() - started, 3),
        }
        emit_json(out)
        return 0
    where = (
        f" from {result.branch or '?'}@{(result.sha or '?')[:12]}"
        if (result.branch or result.sha)
        else ""
    )
    say(
        f"synced {result.dataset}@{result.workspace}{where}"
        f"{' (new dataset)' if result.created else ''}: "
        f"{len(result.added)} added, {len(result.changed)} changed, {result.unchanged} unchanged, "
        f"{len(result.removed)} removed, {len(result.restored)} restored; "
        f"{uploaded} fixture(s) uploaded ({_megabytes(uploaded_bytes)}), "
        f"{len(by_sha) - uploaded} already on the server"
    )
    for label, ids in (
        ("added", result.added),
        ("changed", result.changed),
        ("restored", result.restored),
        ("removed", result.removed),
    ):
        if ids:
            shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            say(f"  {label}: {shown}")
    return 0


def _upload(client: Client, path: str, file: Path, size: int) -> None:
    try:
        response = client.http.put(
            path,
            content=_read_chunks(file),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            timeout=600.0,
        )
    except OSError as exc:
        raise CliError(f"cannot read fixture file {file}: {exc}") from None
    except Exception as exc:
        raise CliError(f"uploading {file} to {client.base_url} failed: {exc}") from None
    if response.status_code >= 400:
        raise CliError(f"{file}: {client._explain(response)}")


# --------------------------------------------------------------------------- datasets


@datasets.command(name="create")
def datasets_create(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """Create an empty dataset. Needed once per dataset in a promotion target (sync creates
    datasets elsewhere)."""
    with Client() as client:
        resolved = _resolve(client, ref, "dataset")
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
    return f"{last.branch or '?'}@{(last.sha or '?')[:12]} by {last.actor or '?'}"


@datasets.command(name="show")
def datasets_show(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """Show a dataset: its last sync (branch, commit, who) and cases by review state."""
    with Client() as client:
        resolved = _resolve(client, ref, "dataset")
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
        )
    else:
        say("last sync: never")
    return 0


# --------------------------------------------------------------------------- cases


@cases.command(name="list")
def cases_list(ref: DatasetRef, /, *, json: JsonFlag = False) -> int:
    """List the cases of a dataset with their current version and review state."""
    with Client() as client:
        resolved = _resolve(client, ref, "dataset")
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
        resolved = _resolve(client, ref, "case")
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
        parts.append(f"{event.branch or '?'}@{(event.sha or '?')[:12]}")
    if event.comment:
        parts.append(event.comment)
    return " ".join(parts) or None


CommentOpt = Annotated[str | None, Parameter(help="Say why, in the changelog.")]
VersionOpt = Annotated[int | None, Parameter(help="The version to decide on (default: current).")]


def _decide(ref: str, decision: str, comment: str | None, version: int | None, json: bool) -> int:
    with Client() as client:
        resolved = _resolve(client, ref, "case")
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
        resolved = _resolve(client, ref, "case")
        client.post(
            f"/api/workspaces/{resolved.workspace}/cases/{resolved.name}/comments",
            wire.CommentRequest(text=text),
            type=wire.Commented,
        )
    say(f"commented on {resolved}")
    return 0
