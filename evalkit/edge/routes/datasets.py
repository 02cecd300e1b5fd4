"""Datasets, fixtures, sync, cases and review."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from pathlib import Path

from evalkit.auth import access
from evalkit.blobs import BlobStore, fixture_key, open_blob_store
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest, TooLarge
from evalkit.model import datasets as wire
from evalkit.store import cases, datasets
from evalkit.store.workspaces import get_workspace

SYNC_MAX_BODY = 256 * 2**20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def blob_store(call: Call) -> BlobStore:
    state = call.request.app.state
    if getattr(state, "blobs", None) is None:
        state.blobs = open_blob_store(call.settings.resolved_blob_url)
    return state.blobs  # type: ignore[no-any-return]


async def datasets_list_all(call: Call) -> list[wire.Dataset]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await datasets.list_datasets(conn, None)


async def datasets_list(call: Call) -> list[wire.Dataset]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await datasets.list_datasets(conn, ws)


async def datasets_create(call: Call) -> wire.Dataset:
    async with call.db.transaction() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        access.require_write(call.actor, ws.facts, "create datasets in it")
        body: wire.DatasetCreate = await call.payload()
        return await datasets.create_dataset(conn, call.actor, ws, body.name)


async def datasets_show(call: Call) -> wire.Dataset:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await datasets.get_dataset(conn, ws, call.param("dataset"))


async def datasets_sync(call: Call) -> wire.SyncResult:
    async with call.db.transaction() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        access.require_sync(call.actor, ws.facts)
        body: wire.SyncRequest = await call.payload()
        if body.actor is not None and body.actor != call.actor.username:
            access.require_admin(call.actor, "record another user as the actor of a sync")
        return await datasets.sync_dataset(conn, call.actor, ws, call.param("dataset"), body)


async def lint_check(call: Call) -> wire.LintAnswer:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await datasets.lint_check(conn, ws, await call.payload())


async def fixtures_missing(call: Call) -> wire.FixtureMissing:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        access.require_sync(call.actor, ws.facts)
        body: wire.FixtureQuery = await call.payload()
        missing = await datasets.missing_fixtures(conn, body.sha256)
    return wire.FixtureMissing(missing=missing, max_bytes=call.settings.max_fixture_bytes)


async def fixtures_put(call: Call) -> wire.Fixture:
    """Stream the raw body to a temporary file, check its sha256, then store it."""
    sha256 = call.param("sha256")
    if not _SHA256.match(sha256):
        raise BadRequest(
            f"{sha256!r} is not a sha256 (64 lower-case hex digits)", code="bad-sha256"
        )
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_sync(call.actor, ws.facts)
    cap: int = call.settings.max_fixture_bytes
    declared = call.request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise _too_large(sha256, int(declared), cap)
    store = blob_store(call)
    key = fixture_key(sha256)
    fd, name = tempfile.mkstemp(prefix="evalkit-fixture-")
    tmp = Path(name)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            async for chunk in call.request.stream():
                size += len(chunk)
                if size > cap:
                    raise _too_large(sha256, size, cap)
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise BadRequest(
                f"the uploaded bytes ({size}) hash to {digest.hexdigest()}, not {sha256}: "
                "the file changed during the upload or was cut short; sync again",
                code="sha256-mismatch",
            )
        await asyncio.to_thread(store.put_file, key, tmp)
    finally:
        tmp.unlink(missing_ok=True)
    async with call.db.connection() as conn:
        stored = await datasets.record_fixture(conn, call.actor, sha256, size, key)
    return wire.Fixture(sha256=sha256, size=size, stored=stored)


def _too_large(sha256: str, size: int, cap: int) -> TooLarge:
    return TooLarge(
        f"fixture {sha256[:12]}… is over this server's limit of {cap} bytes (got {size}+): "
        "shrink the file, or ask the server's admin to raise max_fixture_bytes",
        code="fixture-too-large",
    )


async def cases_list(call: Call) -> list[wire.CaseSummary]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await cases.list_cases(conn, ws, call.param("dataset"))


async def cases_show(call: Call) -> wire.CaseDetail:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await cases.show_case(conn, ws, call.param("case_id"))


async def _decide(call: Call, decision: str) -> wire.ReviewResult:
    async with call.db.transaction() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        access.require_review(call.actor, ws.facts)
        body: wire.ReviewRequest = await call.payload()
        return await cases.review(conn, call.actor, ws, call.param("case_id"), decision, body)


async def cases_approve(call: Call) -> wire.ReviewResult:
    return await _decide(call, "approve")


async def cases_reject(call: Call) -> wire.ReviewResult:
    return await _decide(call, "reject")


async def cases_comment(call: Call) -> wire.Commented:
    async with call.db.transaction() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        access.require_comment(call.actor, ws.facts)
        body: wire.CommentRequest = await call.payload()
        return await cases.comment(conn, call.actor, ws, call.param("case_id"), body.text)


_WS = "/api/workspaces/{workspace}"
_DS = _WS + "/datasets/{dataset}"
_CASE = _WS + "/cases/{case_id}"

ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/datasets",
        datasets_list_all,
        "Every dataset of every workspace",
        returns=list[wire.Dataset],
        tags=["datasets"],
    ),
    Endpoint(
        "GET",
        _WS + "/datasets",
        datasets_list,
        "The datasets of a workspace",
        returns=list[wire.Dataset],
        tags=["datasets"],
    ),
    Endpoint(
        "POST",
        _WS + "/datasets",
        datasets_create,
        "Create an empty dataset (needed once in a promotion target)",
        body=wire.DatasetCreate,
        returns=wire.Dataset,
        status=201,
        tags=["datasets"],
    ),
    Endpoint(
        "GET",
        _DS,
        datasets_show,
        "One dataset: last sync, counts by review state",
        returns=wire.Dataset,
        tags=["datasets"],
    ),
    Endpoint(
        "POST",
        _DS + "/sync",
        datasets_sync,
        "Apply a suite to a dataset in one transaction (creates the dataset if needed)",
        body=wire.SyncRequest,
        returns=wire.SyncResult,
        tags=["datasets"],
        max_body=SYNC_MAX_BODY,
    ),
    Endpoint(
        "POST",
        _WS + "/lint",
        lint_check,
        "Online lint: case ids taken, overlay targets missing, unknown custom evaluators",
        body=wire.LintQuery,
        returns=wire.LintAnswer,
        tags=["datasets"],
    ),
    Endpoint(
        "POST",
        _WS + "/fixtures/missing",
        fixtures_missing,
        "Which of these sha256 values the server lacks the bytes of",
        body=wire.FixtureQuery,
        returns=wire.FixtureMissing,
        tags=["datasets"],
    ),
    Endpoint(
        "PUT",
        _WS + "/fixtures/{sha256}",
        fixtures_put,
        "Upload fixture bytes as the raw body (application/octet-stream); the server "
        "checks their sha256",
        returns=wire.Fixture,
        tags=["datasets"],
    ),
    Endpoint(
        "GET",
        _DS + "/cases",
        cases_list,
        "The cases of a dataset, current versions",
        returns=list[wire.CaseSummary],
        tags=["cases"],
    ),
    Endpoint(
        "GET",
        _CASE,
        cases_show,
        "One case: versions and changelog",
        returns=wire.CaseDetail,
        tags=["cases"],
    ),
    Endpoint(
        "POST",
        _CASE + "/approve",
        cases_approve,
        "Approve a case version (reviewers, admins); promotes it when linked",
        body=wire.ReviewRequest,
        returns=wire.ReviewResult,
        tags=["cases"],
    ),
    Endpoint(
        "POST",
        _CASE + "/reject",
        cases_reject,
        "Reject a case version (reviewers, admins)",
        body=wire.ReviewRequest,
        returns=wire.ReviewResult,
        tags=["cases"],
    ),
    Endpoint(
        "POST",
        _CASE + "/comments",
        cases_comment,
        "Comment on a case (anyone)",
        body=wire.CommentRequest,
        returns=wire.Commented,
        status=201,
        tags=["cases"],
    ),
]
