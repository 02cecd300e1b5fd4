"""``evalkit lint`` and ``evalkit sync``: check a suite, then put it on the server."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import msgspec
from cyclopts import Parameter

from evalkit.cases import (
    Case,
    FixtureRef,
    LintFinding,
    ProjectConfig,
    ProjectError,
    ProjectNotFound,
    Suite,
    SuiteError,
    SuiteIndex,
    format_report,
    load_project,
    load_suite,
    sync_target,
)
from evalkit.cases.lint import analyze
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import SERVER_URL_ENV, Client, server_url
from evalkit.cli.output import CliError, emit_json, note, say, source_ref
from evalkit.model import datasets as wire

SuiteDir = Annotated[Path, Parameter(help="The suite directory; its name is the dataset name.")]
_CHUNK = 1 << 20


def project_near(directory: Path) -> ProjectConfig | None:
    """The evalkit.yaml of ``directory`` or the nearest directory above it (None: there is
    none); one with errors is refused, naming them."""
    if directory.is_file():
        raise CliError(
            f"{directory} is a file: give the suite directory that holds it "
            f"({directory.parent}); the dataset is named after that directory"
        )
    try:
        return load_project(directory)
    except ProjectNotFound:
        return None
    except ProjectError as exc:
        raise CliError(exc.message) from None


def _client(project: ProjectConfig | None) -> Client:
    """A client for the server of evalkit.yaml's ``server_url``, unless EVALKIT_SERVER_URL
    names another; without either, the server of the last ``evalkit login``."""
    wanted = project.server_url if project is not None else None
    if wanted is None or os.environ.get(SERVER_URL_ENV):
        return Client()
    wanted = wanted.rstrip("/")
    if wanted != server_url():
        note(
            f"server {wanted} (server_url of {project.path}; {SERVER_URL_ENV} overrides it, "
            f"log in with `evalkit login {wanted}`)"
        )
    return Client(wanted)


# --------------------------------------------------------------------------- lint


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
    project = project_near(directory)
    analysis = analyze(directory, project)
    report = analysis.report
    if not offline and directory.is_dir():
        report.findings.extend(_online_findings(analysis, project, dataset))
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


def _online_findings(
    analysis: Any, project: ProjectConfig | None, dataset: str | None
) -> list[LintFinding]:
    report = analysis.report
    with _client(project) as client:
        ref = client.resolve(dataset or report.dataset, "dataset")
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


def _dirty(directory: Path, project: ProjectConfig | None, suite: Suite) -> bool:
    """Whether git sees uncommitted changes (staged, unstaged or untracked files) in what a
    sync reads: the suite directory, evalkit.yaml and the fixture files its cases use."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top is None:
        return False
    read = [directory.resolve()]
    if project is not None:
        read.append(project.path)
    used = {key for case in suite.cases for key in case.fixture_keys}
    read += sorted({ref.path for key, ref in suite.fixtures.items() if key in used})
    inside = [str(path) for path in read if path.is_relative_to(Path(top).resolve())]
    changed = _git(directory, "status", "--porcelain", "--", *inside)
    return changed is not None


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _read_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


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
    soft-removes cases whose files are gone, and records the git branch and commit, and
    whether the synced files had uncommitted changes (shown as "with uncommitted changes").
    Case files unchanged since the last sync from this directory are not parsed again, and
    cases unchanged on the server are sent by hash.
    """
    started = time.monotonic()
    project = project_near(directory)
    index = SuiteIndex.open(directory)
    try:
        return _sync(
            directory,
            project,
            index,
            workspace=workspace,
            actor=actor,
            branch=branch,
            sha=sha,
            json=json,
            started=started,
        )
    finally:
        problem = index.save()
        if problem is not None:
            note(f"could not write the sync index ({problem}): the next sync reads every file")


def _sync(
    directory: Path,
    project: ProjectConfig | None,
    index: SuiteIndex,
    *,
    workspace: str | None,
    actor: str | None,
    branch: str | None,
    sha: str | None,
    json: bool,
    started: float,
) -> int:
    suite = _loaded_suite(directory, project, index)
    branch, sha, dirty = _source(directory, project, suite, branch, sha)
    hashes = {case.id: suite.version_hash(case) for case in suite.cases}
    with _client(project) as client:
        ws = workspace or client.personal_workspace()
        base = f"/api/workspaces/{ws}"
        note(
            f"{suite.name}@{ws}: {len(suite.cases)} cases, {len(suite.fixtures)} fixtures "
            f"({index.read} case file(s) read, {index.parsed} parsed)"
        )
        target = sync_target(client.base_url, ws, suite.name)
        synced = index.synced(target)
        known = {case_id for case_id, digest in hashes.items() if synced.get(case_id) == digest}
        fields = {"branch": branch, "sha": sha, "dirty": dirty, "actor": actor}
        uploads: dict[str, int] = {}
        result = _send(client, base, suite, hashes, known, fields, uploads)
        if result is None:  # the server's dataset is not what this directory last synced
            index.forget(target)
            note(f"{suite.name}@{ws} changed on the server since the last sync from here")
            result = _send(client, base, suite, hashes, set(), fields, uploads)
            assert result is not None
        if result.known is not None:  # the server takes cases by hash
            index.remember(target, hashes)
    for name in result.unknown_custom_evaluators:
        note(
            f"W-CUSTOM-UNKNOWN @{ws} has no remote evaluator named {name!r} (expected for a "
            "Python evaluator)"
        )
    used = {suite.fixtures[key].sha256 for case in suite.cases for key in case.fixture_keys}
    uploaded, uploaded_bytes = len(uploads), sum(uploads.values())
    on_server = len(used) - uploaded
    if json:
        out = msgspec.structs.asdict(result)
        out |= {
            "fixtures_uploaded": uploaded,
            "fixture_bytes_uploaded": uploaded_bytes,
            "fixtures_on_server": on_server,
            "case_files_read": index.read,
            "case_files_parsed": index.parsed,
            "seconds": round(time.monotonic() - started, 3),
        }
        emit_json(out)
    else:
        _say_synced(result, uploaded, uploaded_bytes, on_server)
    return 0


def _loaded_suite(directory: Path, project: ProjectConfig | None, index: SuiteIndex) -> Suite:
    """The suite in ``directory``, its warnings shown; its errors shown and refused."""
    try:
        suite = load_suite(directory, project, index=index)
    except SuiteError as exc:
        note(format_report(exc.report))
        raise CliError(f"{exc.report.dataset}: fix the errors above before syncing") from None
    for warning in suite.warnings:
        note(f"{warning.file}:{warning.line or ''}: {warning.code} {warning.message}")
    return suite


def _source(
    directory: Path,
    project: ProjectConfig | None,
    suite: Suite,
    branch: str | None,
    sha: str | None,
) -> tuple[str | None, str | None, bool]:
    """The branch, commit and dirtiness the sync records: the ones given, else git's (no
    branch on a detached HEAD). Uncommitted changes to the suite are said, not refused."""
    branch = branch or _git(directory, "rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":
        branch = None
    sha = sha or _git(directory, "rev-parse", "HEAD")
    dirty = sha is not None and _dirty(directory, project, suite)
    if dirty:
        note(
            f"{directory} has uncommitted changes (`git status -- {directory}`): the sync is "
            f"recorded as {source_ref(branch, sha, dirty=True)}; commit them first to record "
            "a clean commit"
        )
    return branch, sha, dirty


def _say_synced(
    result: wire.SyncResult, uploaded: int, uploaded_bytes: int, on_server: int
) -> None:
    where = (
        f" from {source_ref(result.branch, result.sha, dirty=result.dirty)}"
        if (result.branch or result.sha)
        else ""
    )
    say(
        f"synced {result.dataset}@{result.workspace}{where}"
        f"{' (new dataset)' if result.created else ''}: "
        f"{len(result.added)} added, {len(result.changed)} changed, {result.unchanged} unchanged, "
        f"{len(result.removed)} removed, {len(result.restored)} restored; "
        f"{uploaded} fixture(s) uploaded ({_megabytes(uploaded_bytes)}), "
        f"{on_server} already on the server"
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


def _send(
    client: Client,
    base: str,
    suite: Suite,
    hashes: dict[str, str],
    known: set[str],
    fields: dict[str, Any],
    uploads: dict[str, int],
) -> wire.SyncResult | None:
    """Upload the fixtures that the cases sent in full need (into ``uploads``: sha256 ->
    bytes), then send the sync request; None when the server refused the ``known`` cases.

    The cases in ``known`` go by hash alone: their fixtures are on the server already (it
    holds the bytes of every version it has, and never deletes them).
    """
    from evalkit.cli.client import nudge_if_outdated

    full = [case for case in suite.cases if case.id not in known]
    by_sha = {suite.fixtures[k].sha256: suite.fixtures[k] for c in full for k in c.fixture_keys}
    _upload_missing_fixtures(client, base, by_sha, uploads)
    request = _sync_request(suite, full, **fields)
    request.known = [
        wire.KnownCase(id=case.id, version_hash=hashes[case.id])
        for case in suite.cases
        if case.id in known
    ]
    note(f"sending {len(full)} cases" + (f", {len(known)} more by hash" if known else ""))
    try:
        response = client.http.post(
            f"{base}/datasets/{suite.name}/sync",
            content=msgspec.json.encode(request),
            headers={"Content-Type": "application/json"},
        )
    except httpx.ConnectError:
        raise CliError(
            f"cannot reach the evalkit server at {client.base_url}; is it running? "
            f"(set {SERVER_URL_ENV} or run `evalkit login URL`)"
        ) from None
    except httpx.TimeoutException:
        raise CliError(f"the evalkit server at {client.base_url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise CliError(f"syncing to {client.base_url} failed: {exc}") from None
    nudge_if_outdated(response)
    if known and _refused_known(response):
        return None
    if response.status_code >= 400:
        raise CliError(client.explain(response))
    return msgspec.json.decode(response.content, type=wire.SyncResult)


def _refused_known(response: httpx.Response) -> bool:
    """The server refused the cases sent by hash: they are not its current versions, or it
    is older than this CLI and takes no cases by hash (a 400 naming the ``known`` field)."""
    if response.status_code not in (400, 409):
        return False
    try:
        error = msgspec.json.decode(response.content)["error"]
    except (msgspec.DecodeError, KeyError, TypeError):
        return False
    if not isinstance(error, dict):
        return False
    return error.get("code") == "known-case-stale" or (
        response.status_code == 400 and "`known`" in str(error.get("message"))
    )


def _upload_missing_fixtures(
    client: Client, base: str, by_sha: dict[str, FixtureRef], uploads: dict[str, int]
) -> None:
    """Upload the fixtures the server lacks, adding each to ``uploads`` (sha256 -> bytes)."""
    if not by_sha:
        return
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
            f"uploading fixture {number}/{len(answer.missing)}: {ref.key} ({_megabytes(ref.size)})"
        )
        _upload(client, f"{base}/fixtures/{digest}", ref.path, ref.size)
        uploads[digest] = ref.size


def _sync_request(
    suite: Suite,
    cases: list[Case],
    *,
    branch: str | None,
    sha: str | None,
    dirty: bool,
    actor: str | None,
) -> wire.SyncRequest:
    """``cases`` as the server takes them: each with its fixtures pinned by sha256."""
    fixtures = suite.fixtures
    return wire.SyncRequest(
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
            for case in cases
        ],
        branch=branch,
        sha=sha,
        dirty=dirty,
        actor=actor,
    )


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
    except httpx.HTTPError as exc:
        raise CliError(f"uploading {file} to {client.base_url} failed: {exc}") from None
    if response.status_code >= 400:
        raise CliError(f"{file}: {client.explain(response)}")
