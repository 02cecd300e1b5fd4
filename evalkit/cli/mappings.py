"""``evalkit agents mapping ...``: an agent's span mapping versions, and the starters."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Literal

from cyclopts import App, Parameter

from evalkit.cli.agents import AgentRef, _read_mapping
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import emit_json, say, table
from evalkit.model import mappings as wire
from evalkit.otel.mapping import load_starter

mapping = App(
    name="mapping",
    help=(
        "Span mappings: where an agent's spans keep the session id, the answer, the messages, "
        "tool calls and token counts (docs/tracing.md). Each change is a new version; a new "
        "version is a draft until activated, and the active one builds the trajectories. The "
        "workspace's writers and admins change them; everyone logged in reads them."
    ),
)

Version = Annotated[int, Parameter(help="The version number (see `evalkit agents mapping list`).")]


def _path(workspace: str, agent: str) -> str:
    return f"/api/workspaces/{workspace}/agents/{agent}/mappings"


@mapping.command(name="set")
def mapping_set(
    name: AgentRef,
    file: Annotated[
        Path,
        Parameter(
            help="A JSON file with the span mapping, or a starter's name (openinference, "
            "genai, vercel-ai, auto)."
        ),
    ],
    /,
    *,
    activate: Annotated[
        bool, Parameter(help="Make the new version active at once (default: a draft).")
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Add a new version of an agent's span mapping, checked against the mapping rules (every
    problem is listed). It stays a draft, unused, until `evalkit agents mapping activate`."""
    body = wire.MappingSet(mapping=_read_mapping(file, ""), activate=activate)
    with Client() as client:
        ref = client.resolve(name, "agent")
        added: wire.MappingVersion = client.post(
            _path(ref.workspace or "", ref.name), body, type=wire.MappingVersion
        )
    if json:
        emit_json(added)
        return 0
    agent = f"{added.agent}@{added.workspace}"
    if added.state == "active":
        say(f"span mapping v{added.version} of {agent} is active")
    else:
        say(
            f"span mapping v{added.version} of {agent} saved as a draft; make it the active one "
            f"with `evalkit agents mapping activate {agent} {added.version}`"
        )
    return 0


@mapping.command(name="activate")
def mapping_activate(name: AgentRef, version: Version, /, *, json: JsonFlag = False) -> int:
    """Make a version the active one; the version active before is retired. A retired version
    can be activated again (to roll back)."""
    with Client() as client:
        ref = client.resolve(name, "agent")
        done: wire.MappingActivated = client.post(
            f"{_path(ref.workspace or '', ref.name)}/{version}/activate",
            type=wire.MappingActivated,
        )
    if json:
        emit_json(done)
        return 0
    agent = f"{done.agent}@{done.workspace}"
    if done.already_active:
        say(f"span mapping v{done.version} of {agent} was already active")
    else:
        retired = f" (v{done.retired} retired)" if done.retired else ""
        say(f"span mapping v{done.version} of {agent} is active{retired}")
    return 0


@mapping.command(name="show")
def mapping_show(
    name: AgentRef,
    /,
    *,
    version: Annotated[
        int | None, Parameter(help="This version instead of the active one.")
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Show the active span mapping of an agent (or one version): its state, who made it, and
    the mapping itself. With --json, the mapping alone is under "mapping"."""
    with Client() as client:
        ref = client.resolve(name, "agent")
        which = "active" if version is None else str(version)
        shown: wire.MappingVersion = client.get(
            f"{_path(ref.workspace or '', ref.name)}/{which}", type=wire.MappingVersion
        )
    if json:
        emit_json(shown)
        return 0
    made = shown.created_at.isoformat(timespec="seconds")
    say(f"span mapping v{shown.version} of {shown.agent}@{shown.workspace}: {shown.state}")
    say(f"created {made} by {shown.created_by or '?'}")
    say(jsonlib.dumps(shown.mapping, indent=2, ensure_ascii=False))
    return 0


@mapping.command(name="list")
def mapping_list(name: AgentRef, /, *, json: JsonFlag = False) -> int:
    """List every version of an agent's span mapping, newest first, with its state."""
    with Client() as client:
        ref = client.resolve(name, "agent")
        rows: list[wire.MappingVersion] = client.get(
            _path(ref.workspace or "", ref.name), type=list[wire.MappingVersion]
        )
    if json:
        emit_json(rows)
        return 0
    table(
        [(f"v{r.version}", r.state, r.created_at, r.created_by) for r in rows],
        ["version", "state", "created", "by"],
    )
    return 0


@mapping.command(name="starter")
def mapping_starter(
    convention: Annotated[
        Literal["openinference", "genai", "vercel-ai", "auto"],
        Parameter(
            help="openinference (OpenInference attributes: LangChain/LangGraph, OpenAI Agents "
            "SDK, LlamaIndex...), genai (the OTel GenAI conventions: message attributes, the "
            "operation details event, the older per-message events; Pydantic AI...), "
            "vercel-ai (the Vercel AI SDK's ai.* telemetry), or auto (the three together, "
            "recognised span by span)."
        ),
    ],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """Print a starter span mapping (JSON) to adapt and pass to `evalkit agents mapping set`
    or `evalkit agents create --mapping`. Needs no server. The output is JSON with or
    without --json."""
    body = load_starter(convention)
    if json:
        emit_json(body)
    else:
        say(jsonlib.dumps(body, indent=2, ensure_ascii=False))
    return 0
