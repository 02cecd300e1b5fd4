"""``evalkit cases from-session``: a case file from a stored trace session.

What the file holds is decided in ``evalkit.importers.session``, written by the same writer
as ``evalkit import``; this module finds the session on the server and reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say
from evalkit.cli.traces_check import agent_of_session
from evalkit.model import agents as agents_wire
from evalkit.model import otel as wire
from evalkit.model.names import Ref

NO_SUCH_SESSION = "[no-such-session]"
AGENTS_NAMED = 10
"""How many of the searched agents an unknown-session error names."""


def cases_from_session(
    session_id: Annotated[str, Parameter(help="The stored session's id.")],
    /,
    *,
    into: Annotated[
        Path,
        Parameter(
            help="The suite directory to write the case file in, e.g. cases/qa (created if "
            "missing); its name starts the case id."
        ),
    ],
    agent: Annotated[
        str | None,
        Parameter(
            help="The session's agent, NAME@WORKSPACE. Needed only when more than one agent "
            "has a session of that id."
        ),
    ] = None,
    expected: Annotated[
        Literal["answer"] | None,
        Parameter(
            help="'answer': write the session's final answer as expected.answer, marked for "
            "review in the file (it is what the agent said, not a checked answer)."
        ),
    ] = None,
    tag: Annotated[
        list[str] | None,
        Parameter(name="--tag", help="A tag of the case (repeatable)."),
    ] = None,
    force: Annotated[
        bool,
        Parameter(
            help="Rewrite the session's case file when it exists (keys written by hand, "
            "such as evaluators, stay)."
        ),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Write a case file from a stored trace session: the input is the first user message
    of the trajectory the agent's active mapping builds (as `evalkit traces check` shows
    it), a comment names the session, agent and time, and metadata.mined_from keeps them.
    The case id comes from the suite and the session id, so a second run finds the file and
    leaves it as it is (say --force to rewrite it). Lint, review and sync it like any case."""
    from evalkit.importers.session import apply_session_case, plan_session_case

    with Client() as client:
        ref = client.resolve(agent, "agent") if agent else _find_agent(client, session_id)
        check: wire.TraceCheck = client.get(
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}/sessions/"
            f"{quote(session_id, safe='')}/check",
            type=wire.TraceCheck,
        )
    case = plan_session_case(
        check, into, expected_answer=expected == "answer", tags=tag or [], force=force
    )
    apply_session_case(case)
    if json:
        emit_json(
            {
                "action": case.action,
                "case_id": case.case_id,
                "path": str(case.path),
                "agent": case.agent,
                "session_id": case.session_id,
            }
        )
        return 0
    what = f"session {case.session_id} of {case.agent}"
    if case.action == "exists":
        say(
            f"{case.path} already holds {what} (case {case.case_id}): left as it is; "
            "--force rewrites it"
        )
    elif case.action == "unchanged":
        say(f"{case.path} already holds {what} as it would be written: unchanged")
    else:
        verb = "wrote" if case.action == "add" else "rewrote"
        say(f"{verb} {case.path} (case {case.case_id}) from {what}")
        if expected == "answer":
            say("  expected.answer is the agent's own answer: review it before you sync")
    return 0


def _find_agent(client: Client, session_id: str) -> Ref:
    """The one agent that has the session; an unknown id names the agents searched."""
    try:
        return agent_of_session(client, session_id)
    except CliError as exc:
        if not exc.message.endswith(NO_SUCH_SESSION):
            raise
    searched: list[agents_wire.Agent] = client.get("/api/agents", type=list[agents_wire.Agent])
    names = sorted(f"{a.name}@{a.workspace}" for a in searched)
    shown = ", ".join(names[:AGENTS_NAMED])
    more = f" and {len(names) - AGENTS_NAMED} more" if len(names) > AGENTS_NAMED else ""
    among = f"{len(names)} agents searched: {shown}{more}" if names else "no agents exist yet"
    raise CliError(
        f"no session {session_id!r} in any agent ({among}); see `evalkit traces list` for "
        "the stored sessions, or check that the exporter sends the session id attribute "
        f"the agent's mapping names {NO_SUCH_SESSION}"
    )
