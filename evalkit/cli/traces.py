"""``evalkit traces ...``: the sessions the collector stored and their spans."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import emit_json, say, table
from evalkit.model import otel as wire
from evalkit.otel.model import Span

traces = App(
    name="traces",
    help=(
        "Traces the collector stored, by session: every span of a trace belongs to the "
        "session of the trace's root span. Everyone logged in reads them."
    ),
)

KINDS = {0: "", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@traces.command(name="list")
def traces_list(
    *,
    agent: Annotated[
        str | None, Parameter(help="Only this agent's sessions (NAME@WORKSPACE).")
    ] = None,
    limit: Annotated[int, Parameter(help="At most this many sessions (1 to 1000).")] = 100,
    json: JsonFlag = False,
) -> int:
    """List trace sessions, most recently active first. Orphan traces are listed too, by
    their trace id: traces whose root span never arrived and none of whose spans names a
    session (see otel.orphan_seconds)."""
    with Client() as client:
        if agent:
            ref = client.resolve(agent, "agent")
            path = f"/api/workspaces/{ref.workspace}/agents/{ref.name}/sessions?limit={limit}"
        else:
            path = f"/api/traces?limit={limit}"
        rows: list[wire.TraceSession] = client.get(path, type=list[wire.TraceSession])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                s.session_id,
                f"{s.agent}@{s.workspace}",
                s.span_count,
                _size(s.bytes),
                "orphan trace" if s.unassigned else "truncated" if s.truncated else "",
                s.run_id,
                s.last_received_at,
            )
            for s in rows
        ],
        ["session", "agent", "spans", "size", "", "run", "last span received"],
    )
    return 0


@traces.command(name="show")
def traces_show(
    session_id: Annotated[str, Parameter(help="The session id (see `evalkit traces list`).")],
    /,
    *,
    agent: Annotated[str, Parameter(help="The session's agent, NAME@WORKSPACE.")],
    json: JsonFlag = False,
) -> int:
    """Show a session and its spans as a tree (parents before children, by start time).
    With --json, the spans exactly as stored: attributes, events, resource and scope."""
    with Client() as client:
        ref = client.resolve(agent, "agent")
        detail: wire.TraceSessionDetail = client.get(
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}/sessions/{session_id}",
            type=wire.TraceSessionDetail,
        )
    if json:
        emit_json(detail)
        return 0
    s = detail.session
    say(f"{session_kind(s)} {s.session_id} of {s.agent}@{s.workspace}")
    if s.unassigned:
        say(f"  {ORPHAN_NOTE}")
    say(f"  {s.span_count} spans, {_size(s.bytes)}" + (", truncated" if s.truncated else ""))
    if s.rejected_spans:
        say(f"  {s.rejected_spans} spans refused (over otel.max_session_bytes)")
    if s.run_id is not None:
        say(f"  run {s.run_id}")
    say()
    for depth, span in tree(detail.spans):
        took = (span.end_ns - span.start_ns) / 1e6
        kind = KINDS.get(span.kind, str(span.kind))
        status = {1: " ok", 2: " ERROR"}.get(span.status_code, "")
        label = f"{'  ' * depth}{span.name}"
        extra = f" [{kind}]" if kind else ""
        say(f"{label}{extra} {took:.1f} ms{status}  ({span.span_id})")
    return 0


ORPHAN_NOTE = (
    "no session: the trace's root span never arrived and none of its spans carries the "
    "session attribute the agent's mapping names"
)


def session_kind(s: wire.TraceSession) -> str:
    return "orphan trace" if s.unassigned else "session"


def tree(spans: list[Span]) -> list[tuple[int, Span]]:
    """Spans in depth-first order under their parents; a span whose parent is not in the
    session starts its own branch."""
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[Span]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, Span]] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            out.append((depth, span))
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return out


def _size(n: int) -> str:
    if n < 10_000:
        return f"{n} B"
    if n < 10_000_000:
        return f"{n / 1000:.0f} kB"
    return f"{n / 1_000_000:.0f} MB"


# Commands of the group that live in other modules, imported when they run.
traces.command("evalkit.cli.traces_check:traces_check", name="check")
