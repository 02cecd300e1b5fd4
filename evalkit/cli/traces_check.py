"""``evalkit traces check``: what the server makes of one session."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say
from evalkit.cli.traces import ORPHAN_NOTE, session_kind
from evalkit.model import otel as wire
from evalkit.model.names import Ref


def traces_check(
    session_id: Annotated[
        str,
        Parameter(help="The session id (for a run: its session), or an orphan trace's id."),
    ],
    /,
    *,
    agent: Annotated[
        str | None,
        Parameter(
            help="The session's agent, NAME@WORKSPACE. Needed only when more than one agent "
            "has a session of that id; without it, the agent is the one that has it."
        ),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Show what the server makes of a session: its spans, the trajectory the agent's
    active mapping builds from them, step by step, and every thing the mapping could not
    read, and what looks wrong though it was read (a JSON answer, an envelope around a tool's
    result, an empty user step, spans of a known convention the mapping does not classify).
    Exits 1 when the trajectory is not valid ATIF, something went unread, or a finding holds.

    Without --agent, the session is looked up by its id in every agent; when more than one
    agent has it, the command lists them and exits 2: say which with --agent."""
    with Client() as client:
        ref = client.resolve(agent, "agent") if agent else agent_of_session(client, session_id)
        check = session_check(client, ref, session_id)
    if json:
        emit_json(check)
        return _exit_code(check)
    s = check.session
    what = f"{session_kind(s)} {s.session_id} of {s.agent}@{s.workspace}"
    say(f"{what}, mapping v{check.mapping_version}")
    if s.unassigned:
        say(f"  {ORPHAN_NOTE}")
    excluded = f", {check.spans_excluded} left out by exclude_spans" if check.spans_excluded else ""
    truncated = (
        " (truncated: spans over otel.max_session_bytes were refused)" if s.truncated else ""
    )
    say(f"  {check.spans_read} spans read{excluded}{truncated}")
    say(f"  answer: {check.answer if check.answer is not None else '-'}")
    say(f"  {len(check.steps)} steps:")
    for step in check.steps:
        calls = f" -> {', '.join(step.tool_calls)}" if step.tool_calls else ""
        seen = f" ({step.observations} results)" if step.observations else ""
        say(f"    {step.step_id:>3} {step.source:<6} {step.message}{calls}{seen}")
    if check.unread:
        say(f"  the mapping could not read {len(check.unread)} things:")
        for line in check.unread:
            say(f"    {line}")
    if check.findings:
        say(f"  {len(check.findings)} things look wrong:")
        for finding in check.findings:
            span = f"span {finding.span_id}, " if finding.span_id else ""
            say(f"    [{finding.rule}] {span}{finding.attribute}: {finding.message}")
    if check.trajectory_valid:
        say("  trajectory: valid ATIF")
    else:
        say("  trajectory read failed: it breaks ATIF rules:")
        for line in check.trajectory_errors[:20]:
            say(f"    {line}")
    return _exit_code(check)


def session_check(client: Client, ref: Ref, session_id: str) -> wire.TraceCheck:
    """What the server makes of agent ``ref``'s session ``session_id``."""
    check: wire.TraceCheck = client.get(
        f"/api/workspaces/{ref.workspace}/agents/{ref.name}/sessions/"
        f"{quote(session_id, safe='')}/check",
        type=wire.TraceCheck,
    )
    return check


def agent_of_session(client: Client, session_id: str) -> Ref:
    """The one agent that has a session (or orphan trace) of this id."""
    found: list[wire.TraceSession] = client.get(
        f"/api/traces/{quote(session_id, safe='')}", type=list[wire.TraceSession]
    )
    agents = {str(ref): ref for ref in (Ref(s.agent, s.workspace) for s in found)}
    if len(agents) > 1:
        raise CliError(
            f"{len(agents)} agents have a session {session_id!r}: {', '.join(sorted(agents))}; "
            "say which with --agent NAME@WORKSPACE",
            exit_code=2,
        )
    [ref] = agents.values()  # the server answers 404 no-such-session when no agent has it
    return ref


def _exit_code(check: wire.TraceCheck) -> int:
    return 0 if check.trajectory_valid and not check.unread and not check.findings else 1
