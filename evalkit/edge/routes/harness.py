"""``POST .../agents/{agent}/check``: the server checks a shared agent's harness, as it
would drive it (the stored key, the egress policy, input files by signed URL)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from evalkit import outbound
from evalkit.auth import access
from evalkit.blobs import fixture_key, signing
from evalkit.config import public_url
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.agents import secret_box
from evalkit.edge.routes.datasets import blob_store
from evalkit.errors import BadRequest
from evalkit.harness.check import CHECK_FILE_BYTES, CHECK_FILE_SHA256, check_harness
from evalkit.harness.client import HarnessClient
from evalkit.http1 import Http1Client
from evalkit.model.harness_check import CheckReport, HarnessCheckRequest
from evalkit.store import agents
from evalkit.store.workspaces import get_workspace


def _store_check_file(call: Call) -> None:
    """Put the check's input file in the blob store (content-addressed: once is enough)."""
    store = blob_store(call)
    key = fixture_key(CHECK_FILE_SHA256)
    if store.exists(key):
        return
    fd, name = tempfile.mkstemp(prefix="evalkit-check-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(CHECK_FILE_BYTES)
        store.put_file(key, Path(name))
    finally:
        Path(name).unlink(missing_ok=True)


async def agents_check(call: Call) -> CheckReport:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        if ws.facts.kind == "personal":
            # Refuses everyone: the owner with server-cannot-drive-personal-agent.
            agent_ref = f"{call.param('agent')}@{ws.facts.name}"
            access.require_run_agent(call.actor, ws.facts, driven_by_server=True, agent=agent_ref)
        access.require_write(call.actor, ws.facts, "check its agents")
        agent = await agents.get_agent(conn, ws.id, call.param("agent"))
        body: HarnessCheckRequest = await call.payload()
        if not agent.harness_url:
            raise BadRequest(
                f"{agent.ref} is code-driven (no harness URL), so there is no harness to "
                "check; give it one with `evalkit agents edit --harness-url`",
                code="no-harness",
            )
        api_key = await agents.agent_api_key(conn, agent.id, secret_box(call))
    await outbound.acheck_url(agent.harness_url, call.settings.egress)
    file_url = None
    if call.settings.encryption_key:
        await asyncio.to_thread(_store_check_file, call)
        file_url = signing.sign_fixture_url(
            public_url(call.settings), CHECK_FILE_SHA256, call.settings.encryption_key
        )
    http_timeout = min(30.0, body.timeout)
    async with Http1Client(call.settings.egress, timeout=http_timeout) as http:
        client = HarnessClient(agent.harness_url, api_key, http)
        return await check_harness(client, file_url=file_url, timeout=body.timeout, agent=agent.ref)


ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/workspaces/{workspace}/agents/{agent}/check",
        agents_check,
        "Check a shared agent's harness against its declared capabilities (the "
        "workspace's writers, admins); one row per capability",
        body=HarnessCheckRequest,
        returns=CheckReport,
        tags=["agents"],
    ),
]
