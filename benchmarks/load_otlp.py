"""Load: OTLP ingest held at the benchmark rate (20,000 spans/s) for 60 seconds.

Starts an embedded PostgreSQL and the edge (`evalkit server --no-worker`, its own process),
creates an agent with the OpenInference starter mapping and an agent token, and posts
protobuf batches of 512 spans (the agent-shaped sessions of `otlp_ingest.py`: 64 sessions
of 8 spans, about 640 bytes a span) on a fixed schedule: one batch every 512 / rate
seconds, whatever the answers, with at most `--concurrency` batches in flight (a batch
waits for a free slot when the edge falls behind; the schedule then slips, and the script
says by how much). Each batch is the same template with its trace ids and session ids
rewritten in place (same lengths), so every span is new and building a batch costs the
client next to nothing.

Every 10 s window it prints spans acknowledged (an ack comes after COMMIT: they are
persisted), p50 and p99 ack latency, errors and the edge's resident memory. At the end:
spans acknowledged against spans counted in the database (lost = acked - stored, must be
0), errors (must be 0), the edge's memory at the start and the end of the timed phase and
its peak, and the database connections the edge held.

    uv run python benchmarks/load_otlp.py [--seconds 60] [--rate 20000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

sys.path.insert(0, str(Path(__file__).parent))
from _load import Watch, load_stack, machine, memory_mb, percentile, report_found
from otlp_ingest import BATCH, SPANS_PER_SESSION, kv, session_spans

from evalkit.otel.mapping import load_starter

TARGET_RATE = 20_000
TRACE_MARK = bytes.fromhex("fe11ed0fba7c")
"""The first 6 bytes of every trace id in the template, rewritten per batch."""
SESSION_MARK = b"@@batch@@"
"""Part of every session id in the template, rewritten per batch."""


def template() -> bytes:
    """One export request of 512 spans whose trace ids start with TRACE_MARK and whose
    session ids contain SESSION_MARK."""
    rng = random.Random(11)
    spans: list[Span] = []
    now = time.time_ns()
    for s in range(BATCH // SPANS_PER_SESSION):
        session = f"session-{SESSION_MARK.decode()}-{s:03d}"
        for span in session_spans(rng, session, now + s * 1000):
            span.trace_id = TRACE_MARK + span.trace_id[len(TRACE_MARK) :]
            spans.append(span)
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[kv("service.name", "finance-agent")]),
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name="openinference.instrumentation.openai"),
                        spans=spans,
                    )
                ],
            )
        ]
    )
    body = request.SerializeToString()
    if body.count(TRACE_MARK) != BATCH or body.count(SESSION_MARK) != BATCH:
        raise SystemExit("the template's marks are not where expected; change TRACE_MARK")
    return body


def batch(body: bytes, nonce: int, n: int) -> bytes:
    """The template with trace ids and session ids unique to batch n of this run."""
    trace = (nonce << 32 | n).to_bytes(6, "big")
    return body.replace(TRACE_MARK, trace).replace(SESSION_MARK, f"{nonce:03d}{n:06d}".encode())


class Window:
    def __init__(self) -> None:
        self.acked = 0
        self.latencies: list[float] = []
        self.errors = 0


async def drive(
    url: str,
    token: str,
    body: bytes,
    *,
    seconds: float,
    rate: float,
    concurrency: int,
    window: float,
    first: int,
    on_window: Callable[[int, Window, float], None],
) -> dict:
    """Post batches on schedule for `seconds`; returns what was sent, acked and refused."""
    interval = BATCH / rate
    count = int(seconds / interval)
    nonce = random.randrange(1, 255)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"}
    slots = asyncio.Semaphore(concurrency)
    windows: dict[int, Window] = {}
    errors: dict[str, int] = {}
    latencies: list[float] = []
    acked = 0
    late = 0
    tasks: set[asyncio.Task[None]] = set()

    async with httpx.AsyncClient(
        timeout=60, limits=httpx.Limits(max_connections=concurrency)
    ) as client:
        started = time.perf_counter()

        async def post(n: int) -> None:
            nonlocal acked
            began = time.perf_counter()
            try:
                r = await client.post(url, content=batch(body, nonce, first + n), headers=headers)
                problem = None if r.status_code == 200 and not r.content else str(r.status_code)
                if problem and r.status_code == 200:
                    problem = "200 with a partial success"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            finally:
                slots.release()
            now = time.perf_counter()
            w = windows.setdefault(int((now - started) // window), Window())
            if problem is None:
                acked += BATCH
                w.acked += BATCH
                w.latencies.append(now - began)
                latencies.append(now - began)
            else:
                w.errors += 1
                errors[problem] = errors.get(problem, 0) + 1

        shown = 0

        def show(index: int, length: float) -> None:
            on_window(index, windows.get(index, Window()), length)

        async def report() -> None:
            nonlocal shown
            while True:
                await asyncio.sleep(0.2)
                current = int((time.perf_counter() - started) // window)
                while shown < current:
                    show(shown, window)
                    shown += 1

        reporter = asyncio.create_task(report())
        for n in range(count):
            due = started + n * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            if time.perf_counter() - due > interval:
                late += 1
            task = asyncio.create_task(post(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        sent_in = time.perf_counter() - started
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
        reporter.cancel()
        while shown * window < elapsed:
            length = min(window, elapsed - shown * window)
            if length >= 1:  # a shorter tail counts in the totals only
                show(shown, length)
            shown += 1
    return {
        "sent": count,
        "sent_in": sent_in,
        "elapsed": elapsed,
        "acked": acked,
        "late": late,
        "errors": errors,
        "latencies": sorted(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="timed phase (default 60)")
    parser.add_argument("--rate", type=float, default=TARGET_RATE, help="spans/s offered")
    parser.add_argument("--concurrency", type=int, default=32, help="most batches in flight")
    parser.add_argument("--window", type=float, default=10, help="seconds a window")
    parser.add_argument("--warmup", type=int, default=10, help="batches before the clock")
    args = parser.parse_args()

    with load_stack() as stack:
        edge = stack.start_edge()
        auth = {"Authorization": f"Bearer {stack.admin_token()}"}
        with httpx.Client(base_url=stack.url, headers=auth, timeout=60) as api:
            api.post(
                "/api/workspaces/admin/agents",
                json={"name": "finance", "mapping": load_starter("openinference")},
            ).raise_for_status()
            agent_token = api.post(
                "/api/workspaces/admin/agents/finance/tokens", json={"note": "load benchmark"}
            ).json()["token"]
        agent_id = stack.query("SELECT id FROM agents WHERE name = 'finance'")[0][0]
        body = template()
        traces = f"{stack.url}/api/otel/v1/traces"
        print(
            f"OTLP ingest offered at {args.rate:,.0f} spans/s ({args.rate / BATCH:.1f} batches "
            f"of {BATCH} spans a second, {len(body) / BATCH:.0f} bytes a span) for "
            f"{args.seconds:g} s, at most {args.concurrency} batches in flight; one edge "
            f"process; {machine()} before the run",
            flush=True,
        )
        warm = asyncio.run(
            drive(
                traces,
                agent_token,
                body,
                seconds=args.warmup * BATCH / args.rate,
                rate=args.rate,
                concurrency=args.concurrency,
                window=1e9,
                first=0,
                on_window=lambda *_: None,
            )
        )
        if warm["errors"]:
            raise SystemExit(f"warm-up batches refused: {warm['errors']}")
        rss_start = memory_mb(edge.popen.pid)[0]
        stored_before = stack.query("SELECT count(*) FROM spans WHERE agent_id = %s", [agent_id])[
            0
        ][0]

        print(
            f"\n{'window, s':<12}{'acked spans/s':>14}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'errors':>8}{'edge RSS MB':>13}"
        )
        rows: list[tuple[str, float, float, float, int, float]] = []

        def on_window(index: int, w: Window, length: float) -> None:
            w.latencies.sort()
            span = f"{index * args.window:.0f}-{index * args.window + length:.0f}"
            rss = memory_mb(edge.popen.pid)[0]
            p50 = statistics.median(w.latencies) * 1000 if w.latencies else float("nan")
            p99 = percentile(w.latencies, 0.99) * 1000
            rows.append((span, w.acked / length, p50, p99, w.errors, rss))
            print(
                f"{span:<12}{w.acked / length:>14,.0f}{p50:>8.0f}{p99:>8.0f}"
                f"{w.errors:>8}{rss:>13.0f}",
                flush=True,
            )

        with Watch(stack, every=1.0) as watch:
            result = asyncio.run(
                drive(
                    traces,
                    agent_token,
                    body,
                    seconds=args.seconds,
                    rate=args.rate,
                    concurrency=args.concurrency,
                    window=args.window,
                    first=args.warmup,
                    on_window=on_window,
                )
            )
        rss_end, rss_peak = memory_mb(edge.popen.pid)
        stored = (
            stack.query("SELECT count(*) FROM spans WHERE agent_id = %s", [agent_id])[0][0]
            - stored_before
        )
        edge_errors = edge.error_lines()

    latencies = result["latencies"]
    acked = result["acked"]
    lost = acked - stored
    offered = result["sent"] * BATCH
    print()
    print(f"{'measure':<46}{'value':>12}{'target':>10}{'ratio':>8}")
    rate = acked / result["elapsed"]
    print(f"{'spans offered':<46}{offered:>12,}")
    print(
        f"{'offered for, s (schedule: ' + format(args.seconds, 'g') + ')':<46}"
        f"{result['sent_in']:>12.1f}"
    )
    print(f"{'batches sent late (no free slot in time)':<46}{result['late']:>12,}")
    print(
        f"{'persisted spans/s (acked / time to last ack)':<46}{rate:>12,.0f}"
        f"{args.rate:>10,.0f}{rate / args.rate:>8.2f}"
    )
    print(f"{'ack p50, ms':<46}{statistics.median(latencies) * 1000:>12.0f}")
    print(f"{'ack p99, ms':<46}{percentile(latencies, 0.99) * 1000:>12.0f}")
    print(f"{'spans acked':<46}{acked:>12,}")
    print(f"{'spans stored (counted in the database)':<46}{stored:>12,}")
    print(f"{'spans lost (acked - stored)':<46}{lost:>12,}{0:>10}")
    print(f"{'errors (batches not acked)':<46}{sum(result['errors'].values()):>12,}{0:>10}")
    print(f"{'error lines in the edge log':<46}{len(edge_errors):>12,}{0:>10}")
    print(f"{'edge RSS at the start, MB':<46}{rss_start:>12.0f}")
    print(f"{'edge RSS at the end, MB':<46}{rss_end:>12.0f}")
    print(f"{'edge RSS growth, MB':<46}{rss_end - rss_start:>12.0f}")
    print(f"{'edge peak RSS, MB':<46}{rss_peak:>12.0f}{300:>10}{rss_peak / 300:>8.2f}")
    if len(rows) >= 3:
        middle = rows[1][5]
        print(f"{'edge RSS growth after the first window, MB':<46}{rows[-1][5] - middle:>12.0f}")
    print(f"{'peak database connections of the edge':<46}{watch.connections.get('edge', 0):>12}")
    print(f"({machine()} at the end)")
    problems = []
    if lost:
        problems.append(f"{lost} acknowledged spans are not in the database")
    if result["errors"]:
        problems.append(f"batches not acknowledged: {result['errors']}")
    problems.extend(f"edge: {line[:200]}" for line in edge_errors[:5])
    problems.extend(watch.failures)
    report_found(problems)


if __name__ == "__main__":
    main()
