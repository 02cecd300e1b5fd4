"""An agent: its settings, what it provides, how many tokens it has, and its span mapping
versions (view one; edit as a new draft; activate) for the workspace's writers."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.responses import RedirectResponse, Response

from evalkit.edge.routes import agents, mappings, tokens, workspaces
from evalkit.errors import BadRequest
from evalkit.model import agents as agent_wire
from evalkit.model import api
from evalkit.model import mappings as wire
from evalkit.model.harness import PROVIDES
from evalkit.otel.mapping import STARTERS, load_starter
from evalkit.web.page import Page, WebCall, form_struct, use

DONE = {
    "saved": "Saved as a new draft. Activate it when it reads your spans the way you want.",
    "activated": "Activated: new trajectories are built with this version.",
    "already": "This version was already the active one.",
}


def agent_url(workspace: str, agent: str) -> str:
    return f"/w/{quote(workspace)}/agents/{quote(agent)}"


def mapping_url(workspace: str, agent: str, version: int | str) -> str:
    return f"{agent_url(workspace, agent)}/mappings/{quote(str(version))}"


def _ordered(value: Any, template: Any) -> Any:
    """Keys in the order the starter writes them (the database keeps no key order), the
    rest sorted, so a stored mapping reads like the file it came from."""
    if not isinstance(value, dict):
        return value
    known = list(template) if isinstance(template, dict) else []
    keys = [k for k in known if k in value] + sorted(set(value) - set(known))
    inner = template if isinstance(template, dict) else {}
    return {k: _ordered(value[k], inner.get(k)) for k in keys}


def pretty(mapping: dict[str, Any]) -> str:
    ordered = _ordered(mapping, load_starter(STARTERS[0]))
    return json.dumps(ordered, indent=2, ensure_ascii=False)


async def _agent_and_ws(call: WebCall) -> tuple[api.Workspace, agent_wire.Agent, dict[str, str]]:
    params = {"workspace": call.param("workspace"), "agent": call.param("agent")}
    ws = await use(call, workspaces.workspaces_show, params={"workspace": params["workspace"]})
    agent = await use(call, agents.agents_show, params=params)
    return ws, agent, params


async def agent_page(call: WebCall) -> Response:
    ws, agent, params = await _agent_and_ws(call)
    versions: list[wire.MappingVersion] = await use(call, mappings.mappings_list, params=params)
    minted = await use(call, tokens.tokens_list, params=params)
    live = sum(1 for t in minted if t.revoked_at is None)
    return call.render(
        "agent.html",
        ws=ws,
        agent=agent,
        versions=versions,
        provides=[(key, agent.provides.get(key)) for key in PROVIDES],
        tokens={"live": live, "revoked": len(minted) - live},
        done=DONE.get(call.request.query_params.get("done", "")),
        agent_url=agent_url,
        mapping_url=mapping_url,
    )


async def _mapping_view(
    call: WebCall,
    version: str | None,
    *,
    draft: str | None = None,
    error: str | None = None,
    starter: str | None = None,
) -> Response:
    """One version with its editor; ``version`` None is a new mapping from ``starter``."""
    ws, agent, params = await _agent_and_ws(call)
    shown: wire.MappingVersion | None = None
    if version is not None:
        shown = await use(call, mappings.mappings_show, params={**params, "version": version})
    if draft is None:
        draft = pretty(shown.mapping) if shown else pretty(load_starter(starter or STARTERS[0]))
    versions: list[wire.MappingVersion] = await use(call, mappings.mappings_list, params=params)
    return call.render(
        "agent_mapping.html",
        status=400 if error else 200,
        ws=ws,
        agent=agent,
        shown=shown,
        versions=versions,
        text=pretty(shown.mapping) if shown else "",
        draft=draft,
        starter=starter,
        starters=STARTERS,
        error=error,
        done=DONE.get(call.request.query_params.get("done", "")),
        agent_url=agent_url,
        mapping_url=mapping_url,
    )


async def mapping_page(call: WebCall) -> Response:
    return await _mapping_view(call, call.param("version"))


async def mapping_new(call: WebCall) -> Response:
    """A new mapping (the first, or a fresh start) from one of the shipped starters."""
    starter = call.request.query_params.get("starter") or STARTERS[0]
    if starter not in STARTERS:
        raise BadRequest(f"no starter mapping {starter!r}; the starters are {', '.join(STARTERS)}")
    return await _mapping_view(call, None, starter=starter)


async def mapping_save(call: WebCall) -> Response:
    """A new draft from the textarea. A mistake (not JSON, a broken rule) shows the page
    again with the message and the text as typed, so nothing is lost."""
    form = await call.form()
    text = str(form.get("mapping", ""))
    based_on = str(form.get("based_on", "")) or None
    params = {"workspace": call.param("workspace"), "agent": call.param("agent")}
    ws = await use(call, workspaces.workspaces_show, params={"workspace": params["workspace"]})
    if not ws.writable:  # the handler's access check refuses before it reads the mapping
        await use(call, mappings.mappings_set, params=params, body=wire.MappingSet(mapping={}))
    try:
        if len(text.encode()) > mappings.MAX_MAPPING_BODY:
            raise BadRequest(
                f"the mapping is over {mappings.MAX_MAPPING_BODY // 1024} KiB; a span mapping "
                "names attributes, it should be far smaller"
            )
        try:
            mapping = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRequest(
                f"the mapping is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from None
        if not isinstance(mapping, dict):
            raise BadRequest("the mapping must be a JSON object ({ ... })")
        body = form_struct(wire.MappingSet, {"mapping": mapping})
        saved: wire.MappingVersion = await use(
            call, mappings.mappings_set, params=params, body=body
        )
    except BadRequest as exc:
        return await _mapping_view(
            call, based_on, draft=text, error=exc.message, starter=STARTERS[0]
        )
    target = mapping_url(params["workspace"], params["agent"], saved.version)
    return RedirectResponse(f"{target}?done=saved", 303)


async def mapping_activate(call: WebCall) -> Response:
    await call.form()
    params = {"workspace": call.param("workspace"), "agent": call.param("agent")}
    version = call.param("version")
    done: wire.MappingActivated = await use(
        call, mappings.mappings_activate, params={**params, "version": version}
    )
    outcome = "already" if done.already_active else "activated"
    target = mapping_url(params["workspace"], params["agent"], done.version)
    return RedirectResponse(f"{target}?done={outcome}", 303)


_AGENT = "/w/{workspace}/agents/{agent}"

PAGES = [
    Page("GET", _AGENT, agent_page),
    Page("GET", _AGENT + "/mappings/new", mapping_new),
    Page("GET", _AGENT + "/mappings/{version}", mapping_page),
    Page("POST", _AGENT + "/mappings", mapping_save),
    Page("POST", _AGENT + "/mappings/{version}/activate", mapping_activate),
]
