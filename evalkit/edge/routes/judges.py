"""LLM providers and the default judge. Admins manage them; everyone logged in reads them.
Provider keys go in and never come out."""

from __future__ import annotations

from evalkit import outbound
from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.agents import secret_box
from evalkit.errors import BadRequest
from evalkit.model import judges as wire
from evalkit.store import audit, judges


def _force(call: Call) -> bool:
    force = call.request.query_params.get("force", "false").lower()
    if force not in ("true", "false"):
        raise BadRequest(f"force must be true or false, not {force!r}", code="bad-query")
    return force == "true"


async def providers_list(call: Call) -> list[wire.LlmProvider]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await judges.list_providers(conn)


async def providers_create(call: Call) -> wire.LlmProvider:
    access.require_admin(call.actor, "manage LLM providers")
    body: wire.LlmProviderCreate = await call.payload()
    judges.check_provider(body)
    # The server calls the judge from its workers, so the URL must pass the egress policy.
    await outbound.acheck_url(body.base_url, call.settings.egress)
    box = secret_box(call) if body.api_key is not None else None
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "provider.create", body.name, base_url=body.base_url)
        return await judges.create_provider(conn, call.actor, body, box)


async def providers_delete(call: Call) -> wire.LlmProviderDeleted:
    access.require_admin(call.actor, "manage LLM providers")
    force = _force(call)
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "provider.delete", call.param("provider"))
        return await judges.delete_provider(conn, call.param("provider"), force=force)


async def judge_default_show(call: Call) -> wire.JudgeDefault:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await judges.get_default_judge(conn)


async def judge_default_set(call: Call) -> wire.JudgeDefault:
    access.require_admin(call.actor, "set the default judge")
    body: wire.JudgeDefaultSet = await call.payload()
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "judge.set_default", body.provider, model=body.model)
        return await judges.set_default_judge(conn, call.actor, body)


async def judge_default_clear(call: Call) -> wire.JudgeDefaultCleared:
    access.require_admin(call.actor, "set the default judge")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "judge.clear_default", "default judge")
        return await judges.clear_default_judge(conn)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/llm-providers",
        providers_list,
        "The LLM providers (OpenAI-compatible endpoints) judges can use; keys never shown",
        returns=list[wire.LlmProvider],
        tags=["judge"],
    ),
    Endpoint(
        "POST",
        "/api/llm-providers",
        providers_create,
        "Add an LLM provider (admins); its base URL must pass the egress policy",
        body=wire.LlmProviderCreate,
        returns=wire.LlmProvider,
        status=201,
        tags=["judge"],
    ),
    Endpoint(
        "DELETE",
        "/api/llm-providers/{provider}",
        providers_delete,
        "Delete an LLM provider (admins); the default judge's only with ?force=true, which "
        "unsets the default judge",
        returns=wire.LlmProviderDeleted,
        tags=["judge"],
    ),
    Endpoint(
        "GET",
        "/api/judge-default",
        judge_default_show,
        "The default judge (provider and model); all fields null when none is set",
        returns=wire.JudgeDefault,
        tags=["judge"],
    ),
    Endpoint(
        "PUT",
        "/api/judge-default",
        judge_default_set,
        "Set the default judge (admins): a provider and a model",
        body=wire.JudgeDefaultSet,
        returns=wire.JudgeDefault,
        tags=["judge"],
    ),
    Endpoint(
        "DELETE",
        "/api/judge-default",
        judge_default_clear,
        "Unset the default judge (admins); judge rubrics then score as errors",
        returns=wire.JudgeDefaultCleared,
        tags=["judge"],
    ),
]
