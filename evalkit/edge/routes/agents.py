"""Agents: create, list, show, edit, delete. Keys go in and never come out."""

from __future__ import annotations

from evalkit import outbound
from evalkit.auth import access
from evalkit.auth.secrets import SecretBox
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import agents as wire
from evalkit.store import agents
from evalkit.store.workspaces import WorkspaceRow, get_workspace

_ACTION = "manage agents in it"


def secret_box(call: Call) -> SecretBox:
    """The server's SecretBox, made once (it checks encryption_key when first needed)."""
    state = call.request.app.state
    if getattr(state, "secret_box", None) is None:
        state.secret_box = SecretBox(call.settings.encryption_key)
    return state.secret_box  # type: ignore[no-any-return]


async def _check_egress(call: Call, ws: WorkspaceRow, url: str | None) -> None:
    """The server drives a shared agent, so its harness URL must pass the egress policy.
    A personal agent is driven by its owner's CLI (often at localhost): not checked."""
    if url and ws.facts.kind == "shared":
        await outbound.acheck_url(url, call.settings.egress)


async def agents_list_all(call: Call) -> list[wire.Agent]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await agents.list_agents(conn, None)


async def agents_list(call: Call) -> list[wire.Agent]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await agents.list_agents(conn, ws)


async def agents_show(call: Call) -> wire.Agent:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return (await agents.get_agent(conn, ws.id, call.param("agent"))).to_api()


async def agents_create(call: Call) -> wire.Agent:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    body: wire.AgentCreate = await call.payload()
    await _check_egress(call, ws, body.harness_url)
    box = secret_box(call) if body.api_key is not None else None
    async with call.db.transaction() as conn:
        return await agents.create_agent(conn, call.actor, ws, body, box)


async def agents_edit(call: Call) -> wire.AgentEdited:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    body: wire.AgentEdit = await call.payload()
    if isinstance(body.harness_url, str):
        await _check_egress(call, ws, body.harness_url)
    box = secret_box(call) if isinstance(body.api_key, str) else None
    async with call.db.transaction() as conn:
        return await agents.edit_agent(conn, call.actor, ws, call.param("agent"), body, box)


async def agents_delete(call: Call) -> wire.AgentDeleted:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    force = call.request.query_params.get("force", "false").lower()
    if force not in ("true", "false"):
        raise BadRequest(f"force must be true or false, not {force!r}", code="bad-query")
    async with call.db.transaction() as conn:
        return await agents.delete_agent(conn, ws, call.param("agent"), force=force == "true")


_AGENTS = "/api/workspaces/{workspace}/agents"
_AGENT = _AGENTS + "/{agent}"

ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/agents",
        agents_list_all,
        "Every agent of every workspace",
        returns=list[wire.Agent],
        tags=["agents"],
    ),
    Endpoint(
        "GET",
        _AGENTS,
        agents_list,
        "The agents of a workspace",
        returns=list[wire.Agent],
        tags=["agents"],
    ),
    Endpoint(
        "POST",
        _AGENTS,
        agents_create,
        "Create an agent (the workspace's writers, admins); a shared agent's harness URL "
        "must pass the egress policy",
        body=wire.AgentCreate,
        returns=wire.Agent,
        status=201,
        tags=["agents"],
    ),
    Endpoint(
        "GET",
        _AGENT,
        agents_show,
        "One agent (its key is never returned, only whether it has one)",
        returns=wire.Agent,
        tags=["agents"],
    ),
    Endpoint(
        "PATCH",
        _AGENT,
        agents_edit,
        "Change an agent; a new harness URL without a new key clears the stored key",
        body=wire.AgentEdit,
        returns=wire.AgentEdited,
        tags=["agents"],
    ),
    Endpoint(
        "DELETE",
        _AGENT,
        agents_delete,
        "Delete an agent; with experiments only with ?force=true (they go with it), never "
        "while one is running",
        returns=wire.AgentDeleted,
        tags=["agents"],
    ),
]
