"""Span mapping versions of an agent: a new version is a draft until activated; activating
one retires the version that was active (one active version per agent)."""

from __future__ import annotations

from typing import Any

import msgspec

from evalkit.auth.access import Actor
from evalkit.db import Conn
from evalkit.errors import BadRequest, NotFound
from evalkit.model import mappings as wire
from evalkit.model.names import whole_number
from evalkit.store.agents import check_mapping, get_agent
from evalkit.store.workspaces import WorkspaceRow

_json = msgspec.json.Encoder()


def _version(row: dict[str, Any], ws: WorkspaceRow, agent: str) -> wire.MappingVersion:
    return wire.MappingVersion(
        workspace=ws.facts.name,
        agent=agent,
        version=row["version"],
        state=row["state"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        mapping=row["body"],
    )


async def _lock(conn: Conn, ws: WorkspaceRow, name: str) -> int:
    """The agent's id, locked until the transaction ends: version changes queue here."""
    row = await conn.one("agent_lock_by_name", workspace_id=ws.id, name=name)
    if row is None:
        await get_agent(conn, ws.id, name)  # raises the 404 that names the agent
        raise AssertionError("unreachable: the agent was not found")
    return int(row["id"])


async def set_mapping(
    conn: Conn, actor: Actor, ws: WorkspaceRow, name: str, body: wire.MappingSet
) -> wire.MappingVersion:
    """Check ``body.mapping`` and add it as the agent's next version: a draft, or the active
    version with ``body.activate``."""
    agent_id = await _lock(conn, ws, name)
    check_mapping(body.mapping)
    row = await conn.one(
        "span_mapping_insert_draft",
        agent_id=agent_id,
        body=_json.encode(body.mapping).decode(),
        actor_id=actor.user_id,
    )
    assert row is not None
    version = int(row["version"])
    if body.activate:
        await _activate(conn, agent_id, version)
    return await get_mapping(conn, ws, name, version)


async def activate_mapping(
    conn: Conn, ws: WorkspaceRow, name: str, version: int
) -> wire.MappingActivated:
    """Make ``version`` the active one (a draft, or a retired one to roll back)."""
    agent_id = await _lock(conn, ws, name)
    current = await get_mapping(conn, ws, name, version)
    if current.state == "active":
        return wire.MappingActivated(
            workspace=ws.facts.name, agent=name, version=version, already_active=True
        )
    retired = await _activate(conn, agent_id, version)
    return wire.MappingActivated(
        workspace=ws.facts.name, agent=name, version=version, retired=retired
    )


async def _activate(conn: Conn, agent_id: int, version: int) -> int | None:
    retired = await conn.one("span_mapping_retire_active", agent_id=agent_id)
    activated = await conn.one("span_mapping_activate", agent_id=agent_id, version=version)
    assert activated is not None, "the caller checked that the version exists"
    return None if retired is None else int(retired["version"])


async def list_mappings(conn: Conn, ws: WorkspaceRow, name: str) -> list[wire.MappingVersion]:
    agent = await get_agent(conn, ws.id, name)
    rows = await conn.all("span_mapping_list", agent_id=agent.id)
    return [_version(row, ws, name) for row in rows]


async def get_mapping(
    conn: Conn, ws: WorkspaceRow, name: str, version: int | None
) -> wire.MappingVersion:
    """One version, or the active one (``version`` None)."""
    agent = await get_agent(conn, ws.id, name)
    row = await conn.one("span_mapping_get", agent_id=agent.id, version=version)
    if row is None:
        ref = agent.ref
        if version is None:
            raise NotFound(
                f"agent {ref} has no active span mapping; add one with `evalkit agents mapping "
                f"set {ref} FILE --activate` (versions: `evalkit agents mapping list {ref}`)",
                code="no-active-mapping",
            )
        raise NotFound(
            f"agent {ref} has no span mapping version {version}; see `evalkit agents mapping "
            f"list {ref}`",
            code="no-such-mapping-version",
        )
    return _version(row, ws, name)


def parse_version(text: str) -> int | None:
    """A version from a URL: a number from 1, or ``active`` (None)."""
    if text == "active":
        return None
    number = whole_number(text)
    if number is None or number < 1 or len(text) > 9:
        raise BadRequest(
            f"mapping version {text!r} is not a version number (1, 2, ...) or 'active'",
            code="bad-mapping-version",
        )
    return number
