"""``evalkit cases from-session``: a case file from a stored trace session; ``evalkit cases
mine``: the same for an agent's recent sessions, in bulk.

What the file holds is decided in ``evalkit.importers.session``, written by the same writer
as ``evalkit import``; this module finds the session on the server and reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say
from evalkit.cli.traces_check import agent_of_session, session_check
from evalkit.model import agents as agents_wire
from evalkit.model import session_list as session_wire
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
        check = session_check(client, ref, session_id)
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


WINDOW_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
PAGE = 200


def cases_mine(
    *,
    agent: Annotated[
        str | None,
        Parameter(help="The deployed agent whose sessions to mine, NAME@WORKSPACE."),
    ] = None,
    monitor: Annotated[
        str | None,
        Parameter(
            help="Mine the sessions this monitor (NAME@WORKSPACE) scored, worst first, "
            "instead of the agent's newest."
        ),
    ] = None,
    below: Annotated[
        str | None,
        Parameter(
            help="With --monitor: only sessions whose score is below a value, SCORE=VALUE "
            "(judge=0.5)."
        ),
    ] = None,
    into: Annotated[
        Path,
        Parameter(help="The suite directory to write the case files in, e.g. cases/traffic."),
    ],
    since: Annotated[
        str,
        Parameter(help="How far back to look: a number and m, h, d or w (30m, 24h, 7d, 2w)."),
    ] = "7d",
    limit: Annotated[
        int,
        Parameter(
            help="Write at most this many new case files; with --monitor, mine the worst this "
            "many sessions (those mined before are skipped, not replaced)."
        ),
    ] = 50,
    expected: Annotated[
        Literal["answer"] | None,
        Parameter(
            help="'answer': write each session's final answer as expected.answer, marked "
            "for review in the file."
        ),
    ] = None,
    tag: Annotated[
        list[str] | None,
        Parameter(name="--tag", help="A tag of every case written (repeatable)."),
    ] = None,
    dry_run: Annotated[
        bool, Parameter(help="Say what would be written, and write nothing.")
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Write case files from an agent's recent sessions, newest first: the sessions its
    deployment exported that no experiment's run claims. Each becomes a case the way
    `evalkit cases from-session` writes one; a session mined before (its file is in the
    suite, found by the session it names) is skipped, so running this again writes only
    what is new. Lint, review and sync the files like any case.

    With --monitor, the sessions are the --limit worst the monitor scored in the window (by
    --below's score, else by each session's lowest score): a second run writes none until
    the worst sessions change."""
    from evalkit.importers._model import ImportFailed
    from evalkit.importers.session import apply_session_case, plan_session_case

    if limit < 1:
        raise CliError(f"--limit takes a whole number of at least 1, got {limit}")
    window = parse_window(since)
    cutoff = datetime.now(UTC) - timedelta(seconds=window)
    if (agent is None) == (monitor is None):
        raise CliError("give --agent AGENT@WS or --monitor MONITOR@WS (one of them)", exit_code=2)
    if below is not None and monitor is None:
        raise CliError("--below reads a monitor's scores: give --monitor too", exit_code=2)
    written: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    with Client() as client:
        if monitor is not None:
            ref, found = _monitored_sessions(client, monitor, window, below, limit)
        else:
            ref = client.resolve(agent or "", "agent")
            found = (s.session_id for s in _recent_sessions(client, ref, cutoff))
        for session_id in found:
            if len(written) >= limit:
                break
            try:
                case = plan_session_case(
                    session_check(client, ref, session_id),
                    into,
                    expected_answer=expected == "answer",
                    tags=tag or [],
                    command="evalkit cases mine",
                )
            except ImportFailed as exc:
                skipped.append({"session_id": session_id, "reason": exc.message})
                continue
            if case.action != "add":
                reason = f"already mined as {case.case_id} ({case.path})"
                skipped.append({"session_id": session_id, "reason": reason})
                continue
            if not dry_run:
                apply_session_case(case)
            written.append(
                {"session_id": session_id, "case_id": case.case_id, "path": str(case.path)}
            )
            if not json:
                verb = "would write" if dry_run else "wrote"
                say(f"{verb} {case.path} from session {session_id}")
    if json:
        emit_json(
            {
                "agent": f"{ref.name}@{ref.workspace}",
                "since": cutoff.isoformat(),
                "dry_run": dry_run,
                "written": written,
                "skipped": skipped,
            }
        )
        return 0
    for item in skipped:
        say(f"skipped session {item['session_id']}: {item['reason']}")
    verb = "would write" if dry_run else "wrote"
    say(
        f"{ref.name}@{ref.workspace}, sessions since {cutoff:%Y-%m-%d %H:%M} UTC: {verb} "
        f"{len(written)} case files, skipped {len(skipped)}"
    )
    return 0


def parse_window(text: str, flag: str = "--since") -> float:
    """Seconds of a window written ``7d``, ``24h``, ``30m`` or ``2w``."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit not in WINDOW_UNITS or not number.isdigit() or int(number) == 0:
        raise CliError(
            f"{flag} takes a whole number and a unit m, h, d or w (e.g. 7d or 24h), got {text!r}"
        )
    return int(number) * WINDOW_UNITS[unit]


def _monitored_sessions(
    client: Client, monitor: str, window: float, below: str | None, limit: int
) -> tuple[Ref, Iterator[str]]:
    """The monitor's agent and its ``limit`` worst scored sessions of the window."""
    from evalkit.model import monitors as monitors_wire

    mref = client.resolve(monitor, "monitor")
    params: list[tuple[str, str]] = [("window_seconds", f"{window:g}"), ("limit", str(limit))]
    if below is not None:
        score, sep, value = below.partition("=")
        try:
            threshold = float(value)
        except ValueError:
            threshold = float("nan")
        if not sep or not score.strip() or not 0 <= threshold <= 1:
            raise CliError(
                f"--below takes SCORE=VALUE with a value from 0 to 1 (judge=0.5), got {below!r}",
                exit_code=2,
            )
        params += [("score", score.strip()), ("below", f"{threshold:g}")]
    path = f"/api/monitors/{quote(f'{mref.name}@{mref.workspace}', safe='@')}"
    shown: monitors_wire.MonitorSummary = client.get(
        f"{path}?window_seconds={window:g}", type=monitors_wire.MonitorSummary
    )
    rows: list[monitors_wire.MonitorSession] = client.get(
        f"{path}/sessions?{urlencode(params)}", type=list[monitors_wire.MonitorSession]
    )
    name, _, workspace = shown.monitor.agent.partition("@")
    return Ref(name, workspace), (r.session_id for r in rows)


def _recent_sessions(
    client: Client, ref: Ref, cutoff: datetime
) -> Iterator[session_wire.SessionListed]:
    """The agent's sessions received since ``cutoff`` that no run claims, newest first."""
    agent = quote(f"{ref.name}@{ref.workspace}", safe="")
    offset = 0
    while True:
        page: session_wire.SessionPage = client.get(
            f"/api/trace-sessions?agent={agent}&limit={PAGE}&offset={offset}",
            type=session_wire.SessionPage,
        )
        for session in page.sessions:
            if session.last_received_at < cutoff:
                return
            if session.run is None and not session.unassigned:
                yield session
        if not page.more:
            return
        offset += PAGE
