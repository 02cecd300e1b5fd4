"""Agent tokens: mint (shown once), list, revoke. Writers of the agent's workspace and
admins mint and revoke; every logged-in user reads the list (never a token itself)."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import otel as wire
from evalkit.model.names import whole_number
from evalkit.store import agent_tokens
from evalkit.store.agents import get_agent
from evalkit.store.workspaces import get_workspace

_ACTION = "manage its agents' tokens"


async def tokens_create(call: Call) -> wire.AgentTokenCreated:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    body: wire.AgentTokenCreate = await call.payload()
    async with call.db.transaction() as conn:
        agent = await get_agent(conn, ws.id, call.param("agent"))
        return await agent_tokens.create_token(conn, call.actor, agent, body.note)


async def tokens_list(call: Call) -> list[wire.AgentToken]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        agent = await get_agent(conn, ws.id, call.param("agent"))
        return await agent_tokens.list_tokens(conn, agent.id)


async def tokens_list_all(call: Call) -> list[wire.AgentToken]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await agent_tokens.list_tokens(conn, None)


async def tokens_revoke(call: Call) -> wire.AgentToken:
    access.require_user(call.actor)
    text = call.param("token")
    token_id = whole_number(text)
    if token_id is None:
        raise BadRequest(
            f"a token id is a number (see `evalkit tokens list`), not {text!r}", code="bad-token-id"
        )
    async with call.db.transaction() as conn:
        row = await agent_tokens.token_row(conn, token_id)
        ws = await get_workspace(conn, call.actor, row["workspace"])
        access.require_write(call.actor, ws.facts, _ACTION)
        return await agent_tokens.revoke_token(conn, token_id)


_TOKENS = "/api/workspaces/{workspace}/agents/{agent}/tokens"

ENDPOINTS = [
    Endpoint(
        "POST",
        _TOKENS,
        tokens_create,
        "Mint an agent token (the workspace's writers, admins); the token is in this answer only",
        body=wire.AgentTokenCreate,
        returns=wire.AgentTokenCreated,
        status=201,
        tags=["tokens"],
    ),
    Endpoint(
        "GET",
        _TOKENS,
        tokens_list,
        "An agent's tokens (never the tokens themselves)",
        returns=list[wire.AgentToken],
        tags=["tokens"],
    ),
    Endpoint(
        "GET",
        "/api/tokens",
        tokens_list_all,
        "Every agent token (never the tokens themselves)",
        returns=list[wire.AgentToken],
        tags=["tokens"],
    ),
    Endpoint(
        "POST",
        "/api/tokens/{token}/revoke",
        tokens_revoke,
        "Revoke an agent token (writers of its agent's workspace, admins); idempotent",
        returns=wire.AgentToken,
        tags=["tokens"],
    ),
]
