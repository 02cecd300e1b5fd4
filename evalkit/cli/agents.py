"""``evalkit agents ...``: the agents evalkit runs experiments on."""

from __future__ import annotations

import json as jsonlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from cyclopts import App, Parameter
from msgspec import UNSET

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say, table
from evalkit.errors import BadRequest
from evalkit.model import agents as wire
from evalkit.model.harness import PROVIDES
from evalkit.model.names import Ref, parse_ref

agents = App(
    name="agents",
    help=(
        "Agents: a harness evalkit calls (--harness-url) or code-driven (no URL: the SDK "
        "reports its runs). Their writers and admins manage a workspace's agents; everyone "
        "logged in reads them. API keys are stored encrypted and never shown."
    ),
)

AgentRef = Annotated[
    str, Parameter(help="NAME, or NAME@WORKSPACE (default workspace: your personal one).")
]
WorkspaceOpt = Annotated[
    str | None,
    Parameter(help="The agent's workspace (default: your personal one, or NAME@WORKSPACE's)."),
]
HarnessUrl = Annotated[
    str | None,
    Parameter(
        help="Base URL of the agent's Harness API (e.g. http://localhost:8700). Without one "
        "the agent is code-driven. A shared workspace's agent is called by the server, so its "
        "URL must pass the server's egress policy."
    ),
]
ApiKeyEnv = Annotated[
    str | None,
    Parameter(
        help="Name of the environment variable that holds the harness's API key. The CLI "
        "reads the key from it and sends it; the server stores it encrypted and never shows it."
    ),
]
Source = Annotated[
    Literal["harness", "otel"] | None,
    Parameter(
        help="Where trajectories come from: the harness (GET /runs/{id}/trajectory) or the "
        "agent's OpenTelemetry traces (needs --mapping). On create the default is harness with a "
        "harness URL, otel without."
    ),
]
MappingFile = Annotated[
    Path | None,
    Parameter(
        help="The span mapping (where the session id, answer and messages live in the "
        "spans): a JSON file, or a starter's name as it ships: openinference, genai, "
        "vercel-ai, or auto (all three, recognised span by span). Required with "
        "--trajectory-source otel; each new one becomes the next active version (`evalkit "
        "agents mapping set` adds a draft instead)."
    ),
]
ProvidesOpt = Annotated[
    list[str] | None,
    Parameter(
        consume_multiple=True,
        help=f"What the agent gives back, as KEY=true|false, one or more; keys: "
        f"{', '.join(PROVIDES)}. Edit merges them into the stored ones.",
    ),
]
YesFlag = Annotated[
    bool,
    Parameter(help="Delete the agent even though it has experiments; they are deleted with it."),
]


def _ref(client: Client, text: str, workspace: str | None) -> Ref:
    """NAME or NAME@WS, with --workspace agreeing or absent; bare = personal workspace."""
    try:
        ref = parse_ref(text, "agent")
    except BadRequest as exc:
        raise CliError(exc.message, exit_code=2) from None
    if ref.workspace and workspace and ref.workspace != workspace:
        raise CliError(
            f"{text} names workspace {ref.workspace} but --workspace says {workspace}; "
            "give the workspace once",
            exit_code=2,
        )
    return Ref(ref.name, ref.workspace or workspace or client.personal_workspace())


def key_from_env(agent: wire.Agent) -> str | None:
    """The harness key of an agent this machine drives: read again from the variable it
    was created with (the server never returns it). None when it has no key."""
    if not agent.api_key_env:
        return None
    value = os.environ.get(agent.api_key_env)
    if not value:
        raise CliError(
            f"agent {agent.name}@{agent.workspace} reads its harness key from "
            f"${agent.api_key_env}, which is not set here; export {agent.api_key_env}=... "
            "and run the command again"
        )
    return value


def _read_key(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        state = "is empty" if value == "" else "is not set"
        raise CliError(
            f"--api-key-env {var}: the environment variable {var} {state}; export the key "
            f"in it (export {var}=...) and run the command again",
            exit_code=2,
        )
    return value


def _read_mapping(path: Path, label: str = "--mapping") -> dict[str, Any]:
    """A span mapping file as a JSON object, or a starter by name (``openinference``, ...)
    when no such file exists; ``label`` names the flag it came from."""
    from evalkit.otel.mapping import STARTERS, load_starter

    where = f"{label} {path}" if label else str(path)
    if str(path) in STARTERS and not path.exists():
        return load_starter(str(path))
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CliError(
            f"{where}: no such file, and not a starter's name ({', '.join(STARTERS)})",
            exit_code=2,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{where}: cannot read it ({exc})", exit_code=2) from None
    try:
        mapping = jsonlib.loads(text)
    except jsonlib.JSONDecodeError as exc:
        raise CliError(
            f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            exit_code=2,
        ) from None
    if not isinstance(mapping, dict):
        kind = "a list" if isinstance(mapping, list) else f"a {type(mapping).__name__}"
        raise CliError(
            f"{where}: line 1: the span mapping must be a JSON object, not {kind}",
            exit_code=2,
        )
    return mapping


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _parse_provides(items: list[str]) -> dict[str, bool]:
    provides: dict[str, bool] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(
                f"--provides {item!r}: write KEY=true or KEY=false (keys: {', '.join(PROVIDES)})",
                exit_code=2,
            )
        if value.lower() in _TRUE:
            provides[key] = True
        elif value.lower() in _FALSE:
            provides[key] = False
        else:
            raise CliError(
                f"--provides {item!r}: the value of {key} must be true or false, not {value!r}",
                exit_code=2,
            )
    return provides


def _key_line(agent: wire.Agent) -> str:
    if not agent.has_api_key:
        return "none"
    return f"stored (from {agent.api_key_env})" if agent.api_key_env else "stored"


def _describe(agent: wire.Agent) -> str:
    if agent.kind == "harness":
        return f"harness agent at {agent.harness_url}"
    return "code-driven agent"


@agents.command(name="create")
def agents_create(
    name: AgentRef,
    /,
    *,
    workspace: WorkspaceOpt = None,
    harness_url: HarnessUrl = None,
    api_key_env: ApiKeyEnv = None,
    trajectory_source: Source = None,
    mapping: MappingFile = None,
    max_concurrent_runs: Annotated[
        int, Parameter(help="Most runs of this agent in flight at once, 1 to 1000.")
    ] = wire.DEFAULT_MAX_CONCURRENT_RUNS,
    run_timeout: Annotated[
        float, Parameter(help="Seconds a run may take before evalkit stops it; above 0.")
    ] = wire.DEFAULT_RUN_TIMEOUT,
    poll_interval: Annotated[
        float, Parameter(help="Seconds between two status polls of a run; above 0.")
    ] = wire.DEFAULT_POLL_INTERVAL,
    stop_grace: Annotated[
        float,
        Parameter(help="Seconds a stopped run has to report a final status; 0 or more."),
    ] = wire.DEFAULT_STOP_GRACE,
    trajectory_wait: Annotated[
        float,
        Parameter(help="Seconds to wait at most for a traced run's spans to settle; 0 or more."),
    ] = wire.DEFAULT_TRAJECTORY_WAIT,
    provides: ProvidesOpt = None,
    json: JsonFlag = False,
) -> int:
    """Create an agent. With --harness-url evalkit drives it through its Harness API; without,
    it is code-driven and needs --mapping (its trajectories come from its traces)."""
    body = wire.AgentCreate(
        name="",
        harness_url=harness_url or None,
        api_key=_read_key(api_key_env) if api_key_env else None,
        api_key_env=api_key_env,
        trajectory_source=trajectory_source,
        mapping=_read_mapping(mapping) if mapping else None,
        max_concurrent_runs=max_concurrent_runs,
        run_timeout=run_timeout,
        poll_interval=poll_interval,
        stop_grace=stop_grace,
        trajectory_wait=trajectory_wait,
        provides=_parse_provides(provides or []),
    )
    with Client() as client:
        ref = _ref(client, name, workspace)
        body.name = ref.name
        created: wire.Agent = client.post(
            f"/api/workspaces/{ref.workspace}/agents", body, type=wire.Agent
        )
    if json:
        emit_json(created)
        return 0
    say(f"created agent {created.name}@{created.workspace}: {_describe(created)}")
    if created.has_api_key:
        say(f"API key from {created.api_key_env} stored encrypted")
    if created.mapping_version is not None:
        say(f"span mapping v{created.mapping_version} active")
    return 0


@agents.command(name="edit")
def agents_edit(
    name: AgentRef,
    /,
    *,
    workspace: WorkspaceOpt = None,
    harness_url: Annotated[
        str | None,
        Parameter(
            help="A new harness base URL; '' makes the agent code-driven. A new URL clears "
            "the stored key unless --api-key-env gives one in the same edit."
        ),
    ] = None,
    api_key_env: ApiKeyEnv = None,
    trajectory_source: Source = None,
    mapping: MappingFile = None,
    max_concurrent_runs: Annotated[
        int | None, Parameter(help="Most runs in flight at once, 1 to 1000 (default: keep).")
    ] = None,
    run_timeout: Annotated[
        float | None, Parameter(help="Seconds before a run is stopped, above 0 (default: keep).")
    ] = None,
    poll_interval: Annotated[
        float | None, Parameter(help="Seconds between status polls, above 0 (default: keep).")
    ] = None,
    stop_grace: Annotated[
        float | None,
        Parameter(help="Seconds a stopped run has to finish, 0 or more (default: keep)."),
    ] = None,
    trajectory_wait: Annotated[
        float | None,
        Parameter(help="Seconds to wait for spans to settle, 0 or more (default: keep)."),
    ] = None,
    provides: ProvidesOpt = None,
    json: JsonFlag = False,
) -> int:
    """Change an agent; flags not given keep their value."""
    edit = wire.AgentEdit()
    if harness_url is not None:
        edit.harness_url = harness_url or None
    if api_key_env is not None:
        edit.api_key = _read_key(api_key_env)
        edit.api_key_env = api_key_env
    if trajectory_source is not None:
        edit.trajectory_source = trajectory_source
    if mapping is not None:
        edit.mapping = _read_mapping(mapping)
    for field, value in (
        ("max_concurrent_runs", max_concurrent_runs),
        ("run_timeout", run_timeout),
        ("poll_interval", poll_interval),
        ("stop_grace", stop_grace),
        ("trajectory_wait", trajectory_wait),
    ):
        if value is not None:
            setattr(edit, field, value)
    if provides:
        edit.provides = _parse_provides(provides)
    if all(getattr(edit, f) is UNSET for f in edit.__struct_fields__):
        raise CliError("nothing to change: give at least one flag (see --help)", exit_code=2)
    with Client() as client:
        ref = _ref(client, name, workspace)
        result: wire.AgentEdited = client.request(
            "PATCH",
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}",
            json=edit,
            type=wire.AgentEdited,
        )
    if json:
        emit_json(result)
        return 0
    agent = result.agent
    say(f"updated agent {agent.name}@{agent.workspace}: {_describe(agent)}")
    if result.api_key_cleared:
        say(
            "stored key cleared: a key is only sent to the harness it was given for; set a "
            "new one with --api-key-env VAR"
        )
    elif edit.api_key is not UNSET:
        say(f"API key from {agent.api_key_env} stored encrypted")
    if isinstance(edit.mapping, dict):
        retired = f" (v{result.mapping_retired} retired)" if result.mapping_retired else ""
        say(f"span mapping v{agent.mapping_version} active{retired}")
    return 0


@agents.command(name="list")
def agents_list(
    *,
    workspace: Annotated[
        str | None, Parameter(help="Only this workspace's agents (default: every workspace).")
    ] = None,
    json: JsonFlag = False,
) -> int:
    """List agents with their kind, harness URL and run settings."""
    path = f"/api/workspaces/{workspace}/agents" if workspace else "/api/agents"
    with Client() as client:
        rows: list[wire.Agent] = client.get(path, type=list[wire.Agent])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                f"{a.name}@{a.workspace}",
                a.kind,
                a.harness_url,
                a.has_api_key,
                a.trajectory_source,
                a.max_concurrent_runs,
                f"{a.run_timeout:g}s",
                None if a.mapping_version is None else f"v{a.mapping_version}",
            )
            for a in rows
        ],
        ["agent", "kind", "harness url", "key", "trajectory", "max runs", "timeout", "mapping"],
    )
    return 0


@agents.command(name="show")
def agents_show(
    name: AgentRef, /, *, workspace: WorkspaceOpt = None, json: JsonFlag = False
) -> int:
    """Show one agent. Its API key is never shown, only whether it has one."""
    with Client() as client:
        ref = _ref(client, name, workspace)
        agent: wire.Agent = client.get(
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}", type=wire.Agent
        )
    if json:
        emit_json(agent)
        return 0
    provided = [k for k, v in agent.provides.items() if v]
    lines = [
        ("agent", f"{agent.name}@{agent.workspace}"),
        ("kind", _describe(agent)),
        ("api key", _key_line(agent)),
        ("trajectory source", agent.trajectory_source),
        ("span mapping", "-" if agent.mapping_version is None else f"v{agent.mapping_version}"),
        ("max concurrent runs", str(agent.max_concurrent_runs)),
        ("run timeout", f"{agent.run_timeout:g} s"),
        ("poll interval", f"{agent.poll_interval:g} s"),
        ("stop grace", f"{agent.stop_grace:g} s"),
        ("trajectory wait", f"{agent.trajectory_wait:g} s"),
        ("provides", ", ".join(provided) or "-"),
        (
            "created",
            f"{agent.created_at.isoformat(timespec='seconds')} by {agent.created_by or '?'}",
        ),
        ("updated", agent.updated_at.isoformat(timespec="seconds")),
    ]
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        say(f"{key.ljust(width)}  {value}")
    return 0


@agents.command(name="delete")
def agents_delete(
    name: AgentRef,
    /,
    *,
    workspace: WorkspaceOpt = None,
    yes: YesFlag = False,
    json: JsonFlag = False,
) -> int:
    """Delete an agent. Its experiments (with their runs and trajectories) are deleted with
    it, so an agent that has experiments needs --yes. Refused while one of them is running."""
    with Client() as client:
        ref = _ref(client, name, workspace)
        query = "?force=true" if yes else ""
        deleted: wire.AgentDeleted = client.request(
            "DELETE",
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}{query}",
            type=wire.AgentDeleted,
        )
    if json:
        emit_json(deleted)
        return 0
    also = (
        f" and its {deleted.experiments_deleted} experiment"
        f"{'s' if deleted.experiments_deleted != 1 else ''}"
        if deleted.experiments_deleted
        else ""
    )
    say(f"deleted agent {deleted.name}@{deleted.workspace}{also}")
    return 0


# Commands of the group that live in other modules, imported when they run.
agents.command("evalkit.cli.mappings:mapping")
