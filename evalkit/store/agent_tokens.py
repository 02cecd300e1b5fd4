"""Agent tokens: bearer tokens that send spans for one agent.

Random, shown once, stored as a SHA-256 digest (like login tokens, see
:mod:`evalkit.auth.tokens`); they never expire and are revoked instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.auth import tokens
from evalkit.auth.access import Actor
from evalkit.db import Conn
from evalkit.errors import BadRequest, NotFound, Unauthorized
from evalkit.model import otel as wire
from evalkit.store.agents import AgentRow

HINT_LENGTH = 10
MAX_NOTE_LENGTH = 200


def token_from_row(row: dict[str, Any]) -> wire.AgentToken:
    return wire.AgentToken(
        id=row["id"],
        agent=row["agent"],
        workspace=row["workspace"],
        hint=row["hint"],
        note=row["note"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )


async def create_token(
    conn: Conn, actor: Actor, agent: AgentRow, note: str | None
) -> wire.AgentTokenCreated:
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise BadRequest(
            f"the note is {len(note)} characters; keep it to {MAX_NOTE_LENGTH}", code="bad-note"
        )
    token = tokens.new_token(tokens.AGENT_PREFIX)
    row = await conn.one(
        "agent_token_insert",
        agent_id=agent.id,
        token_hash=tokens.token_digest(token),
        hint=token[:HINT_LENGTH],
        note=note or None,
        actor_id=actor.user_id,
    )
    assert row is not None
    return wire.AgentTokenCreated(token=token, info=await get_token(conn, int(row["id"])))


async def token_row(conn: Conn, token_id: int) -> dict[str, Any]:
    row = await conn.one("agent_token_get", id=token_id)
    if row is None:
        raise NotFound(
            f"no agent token with id {token_id}; see `evalkit tokens list`", code="no-such-token"
        )
    return row


async def get_token(conn: Conn, token_id: int) -> wire.AgentToken:
    return token_from_row(await token_row(conn, token_id))


async def list_tokens(conn: Conn, agent_id: int | None) -> list[wire.AgentToken]:
    return [token_from_row(r) for r in await conn.all("agent_token_list", agent_id=agent_id)]


async def revoke_token(conn: Conn, token_id: int) -> wire.AgentToken:
    await conn.one("agent_token_revoke", id=token_id)
    return await get_token(conn, token_id)


@dataclass(frozen=True, slots=True)
class ResolvedAgentToken:
    actor: Actor
    token_id: int
    agent: str
    workspace: str


async def resolve_agent_token(conn: Conn, token: str) -> ResolvedAgentToken:
    """The agent behind an agent token, or Unauthorized saying why it is not accepted."""
    row = await conn.one("agent_token_resolve", token_hash=tokens.token_digest(token))
    if row is None:
        raise Unauthorized(
            "the agent token is not valid (was its agent deleted?); mint one with "
            "`evalkit tokens create --agent NAME@WORKSPACE`",
            code="bad-token",
        )
    if row["revoked_at"] is not None:
        raise Unauthorized(
            f"this agent token (id {row['token_id']}) was revoked; mint a new one with "
            f"`evalkit tokens create --agent {row['agent']}@{row['workspace']}`",
            code="token-revoked",
        )
    return ResolvedAgentToken(
        Actor(agent_id=row["agent_id"]), row["token_id"], row["agent"], row["workspace"]
    )
