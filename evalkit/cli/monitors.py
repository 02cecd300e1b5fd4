"""``evalkit monitors ...``: online scoring of a deployed agent's sessions, its trends, and
gates on them for cron or CI alerting."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.cases_mining import parse_window
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say, table
from evalkit.model import monitors as wire

monitors = App(
    name="monitors",
    help=(
        "Monitors: score the sessions a deployed agent exports (no run claims them) with a "
        "judge rubric, built-in gauges and remote evaluators; follow the trend, gate on it."
    ),
)

MonitorRef = Annotated[
    str, Parameter(help="The monitor, NAME@WORKSPACE (NAME: your personal workspace).")
]
Evaluators = Annotated[
    list[str] | None,
    Parameter(
        name="--evaluator",
        help="A built-in gauge (latency, steps, tokens, cost, tool_call_count) or a remote "
        "evaluator of the agent's workspace, by name (repeatable).",
    ),
]
Window = Annotated[
    str, Parameter(help="How far back to read scores: a number and m, h, d or w (24h, 7d).")
]


def _path(client: Client, monitor: str, tail: str = "") -> str:
    ref = client.resolve(monitor, "monitor")
    return f"/api/monitors/{quote(f'{ref.name}@{ref.workspace}', safe='@')}{tail}"


@monitors.command(name="create")
def monitors_create(
    name: Annotated[str, Parameter(help="Its name in the agent's workspace.")],
    /,
    *,
    agent: Annotated[str, Parameter(help="The deployed agent, NAME@WORKSPACE.")],
    sample: Annotated[
        float, Parameter(help="The share of sessions to score, from 0 to 1 (0.1: one in ten).")
    ] = 1.0,
    cap_per_hour: Annotated[
        int | None, Parameter(help="At most this many sessions taken per hour (default: no cap).")
    ] = None,
    evaluator: Evaluators = None,
    rubric: Annotated[
        str | None, Parameter(help="A judge rubric; its score is named `judge`.")
    ] = None,
    backfill: Annotated[
        str | None,
        Parameter(help="Also score the stored sessions of this past window (e.g. 7d)."),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Score a deployed agent's sessions as they settle.

    Every session of the agent that no experiment's run claims is considered once it has
    been quiet for the collector's settle time; a deterministic share of them (--sample) is
    scored, at most --cap-per-hour an hour, each at most once per version of the monitor.
    Scoring is a worker's job after the session settles: ingest never waits for it. A judge
    or evaluator that fails after its retries leaves an error score, as for runs. Writers
    of the agent's workspace and admins manage monitors; everyone reads them.
    """
    with Client() as client:
        ref = client.resolve(agent, "agent")
        body = wire.MonitorCreate(
            name=name,
            agent=f"{ref.name}@{ref.workspace}",
            sample_rate=sample,
            cap_per_hour=cap_per_hour,
            evaluators=evaluator or [],
            rubric=rubric,
            backfill_seconds=parse_window(backfill, "--backfill") if backfill else None,
        )
        created: wire.MonitorCreated = client.post("/api/monitors", body, type=wire.MonitorCreated)
    if json:
        emit_json(created)
        return 0
    m = created.monitor
    say(f"created monitor {m.name}@{m.workspace} of {m.agent}: {_what(m)}")
    if created.backfill is not None:
        say(
            f"backfill: {created.backfill.taken} of {created.backfill.considered} stored "
            "sessions queued for scoring"
        )
    say(f"scores show up in `evalkit monitors show {m.name}@{m.workspace}` (a worker scores them)")
    return 0


@monitors.command(name="list")
def monitors_list(
    *,
    workspace: Annotated[str | None, Parameter(help="Only this workspace's monitors.")] = None,
    json: JsonFlag = False,
) -> int:
    """List monitors with what they score with."""
    path = "/api/monitors" + (f"?{urlencode({'workspace': workspace})}" if workspace else "")
    with Client() as client:
        rows: list[wire.Monitor] = client.get(path, type=list[wire.Monitor])
    if json:
        emit_json(rows)
        return 0
    table(
        [(f"{m.name}@{m.workspace}", m.agent, m.version, _what(m)) for m in rows],
        ["monitor", "agent", "version", "scores with"],
    )
    return 0


@monitors.command(name="show")
def monitors_show(monitor: MonitorRef, /, *, window: Window = "7d", json: JsonFlag = False) -> int:
    """Show a monitor and its scores over a window: per score the mean, the pass rate with
    its 95% interval and the mean measurement of gauges, then per day."""
    seconds = parse_window(window, "--window")
    with Client() as client:
        shown: wire.MonitorSummary = client.get(
            _path(client, monitor, f"?window_seconds={seconds:g}"), type=wire.MonitorSummary
        )
    if json:
        emit_json(shown)
        return 0
    m = shown.monitor
    say(f"monitor {m.name}@{m.workspace} (version {m.version}) of {m.agent}: {_what(m)}")
    capped = f"; {m.capped_sessions} passed over by the cap" if m.capped_sessions else ""
    say(f"last {window}: {shown.taken} sessions taken, {shown.scored} scored{capped}")
    if not shown.scores:
        say("no scores in the window yet")
        return 0
    table(
        [
            (
                s.name,
                s.n,
                _num(s.mean),
                _rate(s.pass_rate, s.pass_interval),
                _num(s.raw_mean),
                s.errors,
                s.skipped,
            )
            for s in shown.scores
        ],
        ["score", "n", "mean", "pass rate (95%)", "raw mean", "errors", "skipped"],
    )
    say()
    table(
        [
            (s.name, d.day.isoformat(), d.n, _num(d.mean), _num(d.pass_rate), _num(d.raw_mean))
            for s in shown.scores
            for d in s.days
        ],
        ["score", "day (utc)", "n", "mean", "pass rate", "raw mean"],
    )
    return 0


@monitors.command(name="check")
def monitors_check(
    monitor: MonitorRef,
    /,
    *,
    gate: Annotated[
        list[str],
        Parameter(
            name="--gate",
            help="SCORE[.mean|.pass_rate|.raw_mean] OP NUMBER, e.g. 'judge>=0.8' (repeatable).",
        ),
    ],
    window: Window = "24h",
    json: JsonFlag = False,
) -> int:
    """Check gates on a monitor's recent scores; exits 1 when one fails (for cron or CI
    alerting). A score with no reading in the window fails its gate."""
    seconds = parse_window(window, "--window")
    query = urlencode([("window_seconds", f"{seconds:g}"), *(("gate", g) for g in gate)])
    with Client() as client:
        result: wire.MonitorCheck = client.get(
            _path(client, monitor, f"/check?{query}"), type=wire.MonitorCheck
        )
    if json:
        emit_json(result)
    else:
        for g in result.gates:
            say(f"{'PASS' if g.passed else 'FAIL'} {g.gate}: {g.message}")
        verdict = "passed" if result.passed else "failed"
        say(f"monitor {result.monitor}, last {window}: {verdict}")
    return 0 if result.passed else 1


@monitors.command(name="sessions")
def monitors_sessions(
    monitor: MonitorRef,
    /,
    *,
    window: Window = "7d",
    score: Annotated[
        str | None, Parameter(help="Order by this score (default: each session's lowest).")
    ] = None,
    below: Annotated[
        float | None, Parameter(help="Only sessions whose score is below this value.")
    ] = None,
    limit: Annotated[int, Parameter(help="At most this many sessions (1 to 1000).")] = 20,
    json: JsonFlag = False,
) -> int:
    """List a monitor's scored sessions in a window, worst first."""
    seconds = parse_window(window, "--window")
    params: list[tuple[str, str]] = [("window_seconds", f"{seconds:g}"), ("limit", str(limit))]
    if score:
        params.append(("score", score))
    if below is not None:
        params.append(("below", f"{below:g}"))
    with Client() as client:
        rows: list[wire.MonitorSession] = client.get(
            _path(client, monitor, f"/sessions?{urlencode(params)}"),
            type=list[wire.MonitorSession],
        )
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                s.session_id,
                s.agent,
                s.settled_at,
                ", ".join(f"{k}={_num(v)}" for k, v in sorted(s.scores.items())),
            )
            for s in rows
        ],
        ["session", "agent", "settled", "scores"],
    )
    return 0


@monitors.command(name="update")
def monitors_update(
    monitor: MonitorRef,
    /,
    *,
    sample: Annotated[float | None, Parameter(help="A new share of sessions to score.")] = None,
    cap_per_hour: Annotated[int | None, Parameter(help="A new hourly cap.")] = None,
    no_cap: Annotated[bool, Parameter(help="Remove the hourly cap.")] = False,
    evaluator: Evaluators = None,
    rubric: Annotated[str | None, Parameter(help="A new judge rubric.")] = None,
    no_rubric: Annotated[bool, Parameter(help="Stop judging (keep the other evaluators).")] = False,
    json: JsonFlag = False,
) -> int:
    """Change what a monitor scores with. A real change starts a new version, which takes
    sessions from now on (backfill it for the past); an identical one changes nothing.
    --evaluator replaces the whole list."""
    if cap_per_hour is not None and no_cap:
        raise CliError("give --cap-per-hour or --no-cap, not both", exit_code=2)
    if rubric is not None and no_rubric:
        raise CliError("give --rubric or --no-rubric, not both", exit_code=2)
    body = wire.MonitorUpdate(
        sample_rate=sample,
        cap_per_hour=cap_per_hour,
        no_cap=no_cap,
        evaluators=evaluator,
        rubric=rubric,
        no_rubric=no_rubric,
    )
    with Client() as client:
        changed: wire.Monitor = client.request(
            "PATCH", _path(client, monitor), json=body, type=wire.Monitor
        )
    if json:
        emit_json(changed)
    else:
        say(
            f"monitor {changed.name}@{changed.workspace} is at version {changed.version}: "
            f"{_what(changed)}"
        )
    return 0


@monitors.command(name="backfill")
def monitors_backfill(
    monitor: MonitorRef,
    /,
    *,
    since: Annotated[str, Parameter(help="How far back: a number and m, h, d or w (7d).")],
    json: JsonFlag = False,
) -> int:
    """Score the monitor's stored sessions of a past window (sampled as live ones; the
    hourly cap does not apply). Sessions its version scored already are left alone."""
    body = wire.MonitorBackfill(since_seconds=parse_window(since, "--since"))
    with Client() as client:
        done: wire.MonitorBackfilled = client.post(
            _path(client, monitor, "/backfill"), body, type=wire.MonitorBackfilled
        )
    if json:
        emit_json(done)
    else:
        say(f"queued {done.taken} of {done.considered} stored sessions for scoring")
    return 0


@monitors.command(name="delete")
def monitors_delete(monitor: MonitorRef, /, *, json: JsonFlag = False) -> int:
    """Delete a monitor and every score it gave."""
    with Client() as client:
        gone: wire.Monitor = client.request("DELETE", _path(client, monitor), type=wire.Monitor)
    if json:
        emit_json(gone)
    else:
        say(f"deleted monitor {gone.name}@{gone.workspace}")
    return 0


def _what(m: wire.Monitor) -> str:
    parts = [f"sample {m.sample_rate:g}"]
    if m.cap_per_hour is not None:
        parts.append(f"cap {m.cap_per_hour}/h")
    scorers = [*m.gauges, *m.evaluators, *(["judge"] if m.rubric else [])]
    parts.append(", ".join(scorers))
    return "; ".join(parts)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _rate(rate: float | None, interval: list[float] | None) -> str:
    if rate is None:
        return "-"
    if not interval:
        return f"{rate:.3f}"
    return f"{rate:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
