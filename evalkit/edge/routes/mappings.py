"""Span mapping versions of an agent: list, show, set (a new draft), activate. The agent's
workspace's writers and admins change them; everyone logged in reads them."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import mappings as wire
from evalkit.store import mappings
from evalkit.store.workspaces import get_workspace

_ACTION = "change the span mappings of its agents"
MAX_MAPPING_BODY = 256 * 2**10


async def mappings_list(call: Call) -> list[wire.MappingVersion]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await mappings.list_mappings(conn, ws, call.param("agent"))


async def mappings_show(call: Call) -> wire.MappingVersion:
    access.require_read(call.actor)
    version = mappings.parse_version(call.param("version"))
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await mappings.get_mapping(conn, ws, call.param("agent"), version)


async def mappings_set(call: Call) -> wire.MappingVersion:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    body: wire.MappingSet = await call.payload()
    async with call.db.transaction() as conn:
        return await mappings.set_mapping(conn, call.actor, ws, call.param("agent"), body)


async def mappings_activate(call: Call) -> wire.MappingActivated:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    version = mappings.parse_version(call.param("version"))
    if version is None:
        raise BadRequest(
            "activate takes a version number (1, 2, ...), not 'active'; see the versions with "
            "`evalkit agents mapping list`",
            code="bad-mapping-version",
        )
    async with call.db.transaction() as conn:
        return await mappings.activate_mapping(conn, ws, call.param("agent"), version)


_MAPPINGS = "/api/workspaces/{workspace}/agents/{agent}/mappings"
_VERSION = _MAPPINGS + "/{version}"

ENDPOINTS = [
    Endpoint(
        "GET",
        _MAPPINGS,
        mappings_list,
        "Every span mapping version of an agent, newest first",
        returns=list[wire.MappingVersion],
        tags=["agents"],
    ),
    Endpoint(
        "POST",
        _MAPPINGS,
        mappings_set,
        "Add a span mapping version (a draft unless activate is true); the agent's "
        "workspace's writers and admins",
        body=wire.MappingSet,
        returns=wire.MappingVersion,
        status=201,
        tags=["agents"],
        max_body=MAX_MAPPING_BODY,
    ),
    Endpoint(
        "GET",
        _VERSION,
        mappings_show,
        "One span mapping version of an agent, or the active one (version 'active')",
        returns=wire.MappingVersion,
        tags=["agents"],
    ),
    Endpoint(
        "POST",
        _VERSION + "/activate",
        mappings_activate,
        "Make a span mapping version the active one (the one active before is retired); the "
        "agent's workspace's writers and admins",
        returns=wire.MappingActivated,
        tags=["agents"],
    ),
]
