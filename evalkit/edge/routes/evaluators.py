"""Remote evaluators (Custom Evaluator API endpoints) of a workspace: its writers and
admins manage them, everyone logged in reads them. Keys go in and never come out."""

from __future__ import annotations

from evalkit import outbound
from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.agents import secret_box
from evalkit.model import evaluators as wire
from evalkit.store import evaluators
from evalkit.store.workspaces import get_workspace

_ACTION = "manage remote evaluators in it"


async def evaluators_list_all(call: Call) -> list[wire.Evaluator]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await evaluators.list_evaluators(conn, None)


async def evaluators_list(call: Call) -> list[wire.Evaluator]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await evaluators.list_evaluators(conn, ws)


async def evaluators_create(call: Call) -> wire.Evaluator:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    body: wire.EvaluatorCreate = await call.payload()
    evaluators.check_evaluator(body)
    # The scoring jobs call it from the server, whatever the workspace's kind.
    await outbound.acheck_url(body.endpoint, call.settings.egress)
    box = secret_box(call) if body.api_key is not None else None
    async with call.db.transaction() as conn:
        return await evaluators.create_evaluator(conn, call.actor, ws, body, box)


async def evaluators_delete(call: Call) -> wire.EvaluatorDeleted:
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
    access.require_write(call.actor, ws.facts, _ACTION)
    async with call.db.transaction() as conn:
        return await evaluators.delete_evaluator(conn, ws, call.param("evaluator"))


_EVALUATORS = "/api/workspaces/{workspace}/evaluators"

ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/evaluators",
        evaluators_list_all,
        "Every remote evaluator of every workspace; keys never shown",
        returns=list[wire.Evaluator],
        tags=["evaluators"],
    ),
    Endpoint(
        "GET",
        _EVALUATORS,
        evaluators_list,
        "The remote evaluators of a workspace; keys never shown",
        returns=list[wire.Evaluator],
        tags=["evaluators"],
    ),
    Endpoint(
        "POST",
        _EVALUATORS,
        evaluators_create,
        "Register a remote evaluator (the workspace's writers, admins); its endpoint must "
        "pass the egress policy",
        body=wire.EvaluatorCreate,
        returns=wire.Evaluator,
        status=201,
        tags=["evaluators"],
    ),
    Endpoint(
        "DELETE",
        _EVALUATORS + "/{evaluator}",
        evaluators_delete,
        "Delete a remote evaluator (the workspace's writers, admins); scores it gave stay",
        returns=wire.EvaluatorDeleted,
        tags=["evaluators"],
    ),
]
