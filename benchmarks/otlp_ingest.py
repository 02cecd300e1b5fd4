"""OTLP ingest benchmark: 512-span protobuf batches at concurrency 8 into `evalkit server`.

Starts an embedded PostgreSQL and `evalkit server` as it starts by default (one edge
process per CPU core, at most 4, forked by a supervisor; ``--processes N`` sets the count),
mints an agent token, and posts pre-built batches of agent-shaped sessions
(an AGENT root with LLM and TOOL children carrying OpenInference attributes, about 600 bytes
a span) from 8 concurrent clients. It prints:

- persisted spans per second, counted in the database (the 200 comes after COMMIT, so the
  last ack is the moment the last span is durable), not acks;
- p50 and p99 ack latency;
- the edge's peak RSS (VmHWM): the largest of its processes, and all of them added up;
- the CPU time the edge's processes, the database's processes and the posting client (this
  process) spent per batch (user + system, from /proc): less sensitive to other work on
  the machine than the rates;
- in the same run, the rate of a raw binary COPY of the same rows into the same table (one
  COPY per batch on one connection, no dedupe, no sessions): the ceiling. The measured
  batches are split into ``--chunks`` chunks, each posted and then COPYed (COPYed first in
  every other chunk), each phase right after a CHECKPOINT: a two-core machine whose speed
  drifts by half from one minute to the next then moves both sides of the ratio together,
  and the full-page writes after a checkpoint do not fall by chance on one side;
- the raw COPY's own client CPU and wall time a batch: on one connection the client and
  the backend mostly take turns, so the ceiling moves with the client's CPU too;

and the ratios against the targets (issue 19: 0.70 of the ceiling, p99 100 ms, RSS 200 MB).
With ``--against DIR`` it runs an old tree (its own migrations on its own fresh database,
its edge with ``PYTHONPATH`` set to it) and this one alternately, ``--rounds`` times, and
prints every run, each tree's medians and new / old, with /proc/loadavg around each run.

    uv run python benchmarks/otlp_ingest.py [--batches 300] [--concurrency 8]
    uv run python benchmarks/otlp_ingest.py --against /tmp/old --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from _stack import wait_http
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from psycopg.types.string import BytesBinaryDumper

from evalkit import serve
from evalkit.auth.secrets import generate_key
from evalkit.embedded import EmbeddedPostgres
from evalkit.http1 import Http1Client
from evalkit.otel.mapping import load_starter
from evalkit.otel.otlp import decode_protobuf
from evalkit.sql import queries
from evalkit.store.otel import _COPY_TYPES, copy_row

PASSWORD = "bench-password-1"
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]
BATCH = 512
SPANS_PER_SESSION = 8  # AGENT root, 4 LLM, 3 TOOL
TARGET_RATE = 20_000
TARGET_CEILING = 0.70
TARGET_P99_MS = 100
TARGET_RSS_MB = 200
HERE = Path(__file__).resolve().parent.parent

PROMPT = (
    "You are a careful financial analyst. Read the quarterly statement the user attached and "
    "answer the question with one number and a short justification. Question: what was the "
    "operating margin in Q{n}, and how did it change from the quarter before?"
)
ANSWER = (
    "The operating margin in Q{n} was 18.4%, up from 16.9% the quarter before, mostly from "
    "lower logistics costs; revenue grew 3.1% while operating expenses grew 1.2%."
)


def kv(key: str, value: str | int | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def session_spans(rng: random.Random, session: str, start: int) -> list[Span]:
    trace_id = rng.randbytes(16)
    root_id = rng.randbytes(8)
    common = [kv("session.id", session)]
    spans = [
        Span(
            trace_id=trace_id,
            span_id=root_id,
            name="agent.run",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start,
            end_time_unix_nano=start + 9_000_000_000,
            attributes=[
                *common,
                kv("openinference.span.kind", "AGENT"),
                kv("input.value", PROMPT.format(n=rng.randint(1, 4))),
                kv("output.value", ANSWER.format(n=rng.randint(1, 4))),
            ],
        )
    ]
    for step in range(SPANS_PER_SESSION - 1):
        begin = start + (step + 1) * 1_000_000_000
        if step % 2 == 0:
            attrs = [
                *common,
                kv("openinference.span.kind", "LLM"),
                kv("llm.model_name", "gpt-4o-mini-2024-07-18"),
                kv("llm.provider", "openai"),
                kv("llm.token_count.prompt", rng.randint(200, 4000)),
                kv("llm.token_count.completion", rng.randint(10, 400)),
                kv("llm.token_count.total", rng.randint(210, 4400)),
                kv("llm.input_messages.0.message.role", "user"),
                kv("llm.input_messages.0.message.content", PROMPT.format(n=step)[:160]),
                kv("llm.output_messages.0.message.role", "assistant"),
                kv("llm.output_messages.0.message.content", ANSWER.format(n=step)[:120]),
            ]
            name = "ChatCompletion"
        else:
            attrs = [
                *common,
                kv("openinference.span.kind", "TOOL"),
                kv("tool.name", "read_statement"),
                kv("tool.parameters", '{"file": "q3.pdf", "pages": [3, 4]}'),
                kv("input.value", '{"file": "q3.pdf", "pages": [3, 4]}'),
                kv("output.value", "Operating income 18.4M on revenue 100.0M; " * 4),
            ]
            name = "read_statement"
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=rng.randbytes(8),
                parent_span_id=root_id,
                name=name,
                kind=Span.SPAN_KIND_CLIENT if step % 2 == 0 else Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=begin,
                end_time_unix_nano=begin + 800_000_000,
                attributes=attrs,
            )
        )
    return spans


def make_batches(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    resource = Resource(
        attributes=[
            kv("service.name", "finance-agent"),
            kv("service.version", "1.4.2"),
            kv("telemetry.sdk.language", "python"),
        ]
    )
    scope = InstrumentationScope(name="openinference.instrumentation.openai", version="0.1.20")
    now = time.time_ns()
    batches = []
    for b in range(count):
        spans: list[Span] = []
        for s in range(BATCH // SPANS_PER_SESSION):
            spans.extend(session_spans(rng, f"session-{b:05d}-{s:03d}", now + s * 1000))
        request = ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])
            ]
        )
        batches.append(request.SerializeToString())
    return batches


def pss_mb(pid: int) -> float:
    """The process's proportional share of memory now: pages it shares with the others
    (the edge processes share what the supervisor loaded before it forked them) count
    divided among them, so the edge processes' figures add up to what they take."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def post_all(
    client: Poster, url: str, token: str, batches: list[bytes], concurrency: int
) -> tuple[float, list[float]]:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in batches:
        queue.put_nowait(body)
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"}

    async def worker() -> None:
        while not queue.empty():
            body = queue.get_nowait()
            began = time.perf_counter()
            status, content = await client(url, body, headers)
            latencies.append(time.perf_counter() - began)
            if status != 200 or content:
                raise SystemExit(f"export answered {status}: {content[:300]!r}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


Poster = Callable[[str, bytes, dict[str, str]], Awaitable[tuple[int, bytes]]]
"""Posts one body: its status and response body."""


@asynccontextmanager
async def poster(kind: str, concurrency: int) -> AsyncIterator[Poster]:
    """The posting client: evalkit's own HTTP/1.1 client (``http1``, about a tenth of
    httpx's CPU a request, which this machine's two cores share with the server), or httpx."""
    if kind == "httpx":
        async with httpx.AsyncClient(
            timeout=60, limits=httpx.Limits(max_connections=concurrency)
        ) as client:

            async def post_httpx(url: str, body: bytes, headers: dict[str, str]):
                r = await client.post(url, content=body, headers=headers)
                return r.status_code, r.content

            yield post_httpx
        return
    async with Http1Client(None, timeout=60, max_connections=concurrency) as http1:

        async def post_http1(url: str, body: bytes, headers: dict[str, str]):
            r = await http1.request("POST", url, headers=headers, body=body, max_body=1 << 20)
            return r.status, r.body

        yield post_http1


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def database_cpu_since(pgdata: Path, before: dict[int, float]) -> float:
    """The database's CPU seconds since ``before`` (each process's CPU then), counting in
    full the processes that started since (a connection the edge opened mid-run)."""
    now = cpu_by_pid(postgres_pids(pgdata))
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def postgres_pids(pgdata: Path) -> list[int]:
    """The postmaster and every process it started (backends, WAL writer, checkpointer)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    return [postmaster, *children_of(postmaster)]


def children_of(pid: int) -> list[int]:
    """The processes ``pid`` started (the edge processes of `evalkit server`, the
    database's backends)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def count_spans(db_url: str, agent_id: int) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM spans WHERE agent_id = %s", [agent_id]).fetchone()
    return int(row[0]) if row else 0


def checkpoint(db_url: str) -> None:
    """Write every dirty page now: the phase measured next starts from a checkpoint, so the
    full-page images a checkpoint costs (the first change of each page after it writes the
    whole page to the WAL) are not charged by luck to whichever phase one fell in."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def checkpoints_so_far(db_url: str) -> int:
    """Checkpoints the cluster has begun (timed or requested, CHECKPOINT commands included;
    pg_stat_checkpointer: PostgreSQL 17 and later, as the embedded cluster is)."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT num_timed + num_requested FROM pg_stat_checkpointer").fetchone()
    return int(row[0]) if row else 0


def raw_copy(db_url: str, batches: list[bytes], pgdata: Path) -> tuple[float, int, float, float]:
    """Binary COPY of the same rows (decoded outside the timer) into spans, one COPY per
    batch on one connection: what the table takes with no dedupe and no session work.
    The seconds it took, the rows, the CPU seconds the database's processes spent, and the
    CPU seconds this process spent making and sending the rows (the timed part only)."""
    spent = 0.0
    client = 0.0
    rows = 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        database_pids = postgres_pids(pgdata)  # with this connection's backend
        cpu_before = cpu_seconds(database_pids)
        for body in batches:
            spans = decode_protobuf(body).spans
            received_at = datetime.now(UTC)
            began = time.perf_counter()
            began_cpu = time.process_time()
            with conn.cursor() as cur:
                # psycopg's default dumper for bytea is the DB-API Binary wrapper's, in
                # Python; the plain bytes dumper is in C (the collector uses it too)
                cur.adapters.register_dumper(bytes, BytesBinaryDumper)
                with cur.copy(queries["span_copy"]) as copy:
                    copy.set_types(_COPY_TYPES)
                    for span in spans:
                        copy.write_row(copy_row(span, -1, received_at))
            spent += time.perf_counter() - began
            client += time.process_time() - began_cpu
            rows += len(spans)
        cpu = cpu_seconds(database_pids) - cpu_before
    return spent, rows, cpu, client


def split(items: list[bytes], parts: int) -> list[list[bytes]]:
    size = -(-len(items) // max(1, parts))
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass
class Totals:
    """What the measured chunks of one run add up to: the collector's phases, and the raw
    COPY's."""

    edge: dict[int, float]
    """CPU seconds by edge process."""
    ingest_seconds: float = 0.0
    persisted: int = 0
    latencies: list[float] = field(default_factory=list)
    database: float = 0.0
    client: float = 0.0
    ingest_checkpoints: int = 0
    copy_seconds: float = 0.0
    copy_rows: int = 0
    copy_database: float = 0.0
    copy_client: float = 0.0
    copy_checkpoints: int = 0


def migrate_tree(db_url: str, tree: Path) -> None:
    """Migrate with the tree's own migrations (a tree may be a schema behind or ahead)."""
    code = f"from evalkit.sql import migrate; migrate.upgrade({db_url!r})"
    subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(tree)),
        cwd=tree,
        check=True,
    )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_once(
    cluster: EmbeddedPostgres,
    work: Path,
    tree: Path,
    database: str,
    batches: list[bytes],
    args: argparse.Namespace,
) -> dict[str, float | str]:
    """One measured run of the tree's edge on a fresh database, then the raw COPY ceiling
    on the same database."""
    with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/" + database))
    edge = None
    try:
        migrate_tree(db_url, tree)
        port = serve.free_port()
        env = dict(
            os.environ,
            PYTHONPATH=str(tree),
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=generate_key(),
            EVALKIT_DATA_DIR=str(work / database),
            EVALKIT_ADMIN_PASSWORD=PASSWORD,
        )
        command = [*EVALKIT, "server", "--port", str(port)]
        if args.processes and tree == HERE:  # an old tree may not know the flag
            command += ["--processes", str(args.processes)]
        if args.profile and tree == HERE:  # pyinstrument writes its report when the edge exits
            command[1:1] = ["-m", "pyinstrument", "-r", "text", "-o", str(args.profile)]
        edge = subprocess.Popen(
            command,
            env=env,
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz")
        token = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        api.post(
            "/api/workspaces/admin/agents",
            json={"name": "finance", "mapping": load_starter("openinference")},
        ).raise_for_status()
        agent_token = api.post(
            "/api/workspaces/admin/agents/finance/tokens", json={"note": "benchmark"}
        ).json()["token"]
        with psycopg.connect(db_url) as conn:
            row = conn.execute("SELECT id FROM agents WHERE name = 'finance'").fetchone()
        assert row is not None
        agent_id = int(row[0])

        load_before = loadavg()
        traces = f"{url}/api/otel/v1/traces"
        edge_pids = [edge.pid, *children_of(edge.pid)]
        totals = Totals(edge=dict.fromkeys(edge_pids, 0.0))

        async def ingest(post: Poster, chunk: list[bytes]) -> None:
            checkpoint(db_url)
            checkpoints = checkpoints_so_far(db_url)
            edge_cpu = cpu_by_pid(edge_pids)
            database_cpu = cpu_by_pid(postgres_pids(cluster.pgdata))
            client_cpu = cpu_seconds([os.getpid()])
            elapsed, latencies = await post_all(post, traces, agent_token, chunk, args.concurrency)
            totals.ingest_seconds += elapsed
            totals.latencies += latencies
            for pid, cpu in cpu_by_pid(edge_pids).items():
                totals.edge[pid] += cpu - edge_cpu[pid]
            totals.database += database_cpu_since(cluster.pgdata, database_cpu)
            totals.client += cpu_seconds([os.getpid()]) - client_cpu
            totals.ingest_checkpoints += checkpoints_so_far(db_url) - checkpoints

        def copy(chunk: list[bytes]) -> None:
            checkpoint(db_url)
            checkpoints = checkpoints_so_far(db_url)
            seconds, rows, cpu, client = raw_copy(db_url, chunk, cluster.pgdata)
            totals.copy_seconds += seconds
            totals.copy_rows += rows
            totals.copy_database += cpu
            totals.copy_client += client
            totals.copy_checkpoints += checkpoints_so_far(db_url) - checkpoints

        async def measure() -> None:
            """The warm-up, then each chunk posted and COPYed in turn (the COPY first in
            every other chunk), so that both see the machine in the same state."""
            async with poster(args.client, args.concurrency) as post:
                await post_all(post, traces, agent_token, batches[: args.warmup], args.concurrency)
                warmed_up = count_spans(db_url, agent_id)
                for n, chunk in enumerate(split(batches[args.warmup :], args.chunks)):
                    if n % 2:
                        copy(chunk)
                    await ingest(post, chunk)
                    if not n % 2:
                        copy(chunk)
                totals.persisted = count_spans(db_url, agent_id) - warmed_up  # COPY's: agent -1

        asyncio.run(measure())
        cpu = {
            name: seconds / args.batches * 1000
            for name, seconds in (
                ("edge", sum(totals.edge.values())),
                ("database", totals.database),
                ("client", totals.client),
                ("copy", totals.copy_database),
                ("copy_client", totals.copy_client),
            )
        }
        expected = args.batches * BATCH
        if totals.persisted != expected:
            raise SystemExit(f"expected {expected} spans in the database, found {totals.persisted}")
        rss_each = [peak_rss_mb(pid) for pid in edge_pids]
        latencies = sorted(totals.latencies)
        return {
            "rate": totals.persisted / totals.ingest_seconds,
            "ceiling": totals.copy_rows / totals.copy_seconds,
            "p50": statistics.median(latencies) * 1000,
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "rss": max(rss_each),
            "rss_total": sum(rss_each),
            "pss_total": sum(pss_mb(pid) for pid in edge_pids),
            "edge_processes": len(edge_pids),
            "edge_split": " / ".join(f"{cpu:.1f}" for cpu in totals.edge.values()),
            "edge_cpu": cpu["edge"],
            "database_cpu": cpu["database"],
            "client_cpu": cpu["client"],
            "copy_cpu": cpu["copy"],
            "copy_client_cpu": cpu["copy_client"],
            "copy_wall": totals.copy_seconds / args.batches * 1000,
            "checkpoints": f"{totals.ingest_checkpoints}/{totals.copy_checkpoints}",
            "load_before": load_before,
            "load_after": loadavg(),
        }
    finally:
        if edge is not None:
            edge.terminate()
            try:
                edge.wait(15)
            except subprocess.TimeoutExpired:
                edge.kill()
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def print_one(result: dict[str, float | str]) -> None:
    rate, ceiling = float(result["rate"]), float(result["ceiling"])
    p99, rss = float(result["p99"]), float(result["rss"])
    print()
    print(f"{'measure':<34}{'value':>12}{'target':>12}{'ratio':>8}")
    print(
        f"{'persisted spans/s (counted in DB)':<34}{rate:>12,.0f}{TARGET_RATE:>12,}"
        f"{rate / TARGET_RATE:>8.2f}"
    )
    print(f"{'raw binary COPY ceiling, rows/s':<34}{ceiling:>12,.0f}")
    print(
        f"{'persisted / ceiling':<34}{rate / ceiling:>12.2f}{TARGET_CEILING:>12.2f}"
        f"{rate / ceiling / TARGET_CEILING:>8.2f}"
    )
    print(f"{'ack latency p50, ms':<34}{float(result['p50']):>12.1f}")
    print(f"{'ack latency p99, ms':<34}{p99:>12.1f}{TARGET_P99_MS:>12}{p99 / TARGET_P99_MS:>8.2f}")
    print(
        f"{'edge peak RSS, MB (largest)':<34}{rss:>12.0f}{TARGET_RSS_MB:>12}"
        f"{rss / TARGET_RSS_MB:>8.2f}"
    )
    print(
        f"{'edge processes, RSS MB in all':<34}{float(result['rss_total']):>12.0f}"
        f"  ({int(result['edge_processes'])} processes: the supervisor and the edges; "
        f"CPU s each {result['edge_split']})"
    )
    print(
        f"{'edge processes, PSS MB in all':<34}{float(result['pss_total']):>12.0f}"
        "  (after the run; shared pages counted once)"
    )
    for name in ("edge", "database", "client"):
        print(f"{name + ' CPU per batch, ms':<34}{float(result[name + '_cpu']):>12.1f}")
    print(f"{'database CPU per raw COPY, ms':<34}{float(result['copy_cpu']):>12.1f}")
    print(
        f"{'its client CPU / its wall, ms':<34}{float(result['copy_client_cpu']):>12.1f}"
        f"  / {float(result['copy_wall']):.1f}  (a batch of the raw COPY, on one "
        "connection: this process makes its rows in Python, and the database takes them)"
    )
    print(
        f"{'edge + database CPU, in COPYs':<34}{cpu_in_copies(result):>12.2f}"
        "  (each a raw COPY's database CPU, the same run)"
    )
    print(
        f"{'checkpoints during run / COPY':<34}{result['checkpoints']:>12}"
        "  (each phase begins right after one)"
    )
    print(f"/proc/loadavg before {result['load_before']}, after {result['load_after']}")


COLUMNS = (
    ("rate", "spans/s", ",.0f"),
    ("ceiling", "COPY/s", ",.0f"),
    ("ratio", "/COPY", ".2f"),
    ("p50", "p50 ms", ".0f"),
    ("p99", "p99 ms", ".0f"),
    ("rss", "RSS MB", ".0f"),
    ("pss_total", "PSS all", ".0f"),
    ("edge_cpu", "edge ms", ".1f"),
    ("database_cpu", "db ms", ".1f"),
    ("copy_cpu", "COPY ms", ".1f"),
    ("copy_client_cpu", "COPY cl", ".1f"),
    ("cpu_in_copies", "CPU/COPY", ".2f"),
)


def cpu_in_copies(result: dict[str, float | str]) -> float:
    """The server's CPU a batch (edge and database) over the raw COPY's database CPU a batch,
    both measured in the run: it moves less with the machine's speed than the rates do."""
    server = float(result["edge_cpu"]) + float(result["database_cpu"])
    return server / float(result["copy_cpu"])


def print_rounds(runs: list[tuple[str, dict[str, float | str]]]) -> None:
    """Each run in the order it ran, then each tree's medians and new / old."""
    for _, result in runs:
        result["ratio"] = float(result["rate"]) / float(result["ceiling"])
        result["cpu_in_copies"] = cpu_in_copies(result)
    header = "".join(f"{title:>10}" for _, title, _ in COLUMNS)
    print(f"\n{'tree':<6}{header}   ckpt  loadavg before -> after")
    for tree, result in runs:
        cells = "".join(f"{float(result[key]):>10{spec}}" for key, _, spec in COLUMNS)
        print(
            f"{tree:<6}{cells}  {result['checkpoints']:>5}  "
            f"{result['load_before']} -> {result['load_after']}"
        )
    medians = {
        tree: {
            key: statistics.median(float(r[key]) for t, r in runs if t == tree)
            for key, _, _ in COLUMNS
        }
        for tree in ("old", "new")
    }
    print()
    for tree in ("old", "new"):
        cells = "".join(f"{medians[tree][key]:>10{spec}}" for key, _, spec in COLUMNS)
        print(f"{tree + ' med':<6}{cells}")
    ratios = "".join(f"{medians['new'][key] / medians['old'][key]:>10.2f}" for key, _, _ in COLUMNS)
    print(f"{'new/old':<6}{ratios}")
    print(
        f"\ntargets: /COPY >= {TARGET_CEILING}, p99 < {TARGET_P99_MS} ms, RSS < {TARGET_RSS_MB} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument(
        "--warmup",
        type=int,
        default=40,
        help="batches posted before the measured ones, on the same connections",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--chunks",
        type=int,
        default=4,
        help="the measured batches are posted and COPYed in this many chunks, in turn, so "
        "that the collector and its ceiling meet the same state of a noisy machine",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="an old tree (a checkout or `git archive` of another commit): run it and this "
        "tree alternately, each on a fresh database migrated by its own code",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --against: rounds of both")
    parser.add_argument(
        "--processes",
        type=int,
        help="edge processes of this tree's server (default: the server's own choice)",
    )
    parser.add_argument(
        "--client",
        choices=["http1", "httpx"],
        default="http1",
        help="the posting client: evalkit's HTTP/1.1 client (default), or httpx, which "
        "spends some ten times the CPU a request on the cores the server runs on",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run this tree's edge under pyinstrument (`uv pip install pyinstrument`) and "
        "write its text report here (the figures of a profiled run are not comparable)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    try:
        batches = make_batches(args.warmup + args.batches)
        size = sum(len(b) for b in batches) / len(batches) / BATCH
        print(
            f"{args.batches} batches of {BATCH} spans ({size:.0f} bytes a span in protobuf), "
            f"{BATCH // SPANS_PER_SESSION} sessions a batch, concurrency {args.concurrency}, "
            f"edge processes {args.processes or 'as the server chooses'}, posted by "
            f"{args.client}; this machine: "
            f"{os.cpu_count()} cores, /proc/loadavg "
            f"{loadavg()} before the run"
        )
        if args.against is None:
            print_one(run_once(cluster, work, HERE, "bench", batches, args))
            return
        order = [("old", args.against.resolve()), ("new", HERE)]
        runs = []
        for n in range(args.rounds):
            for tree, path in order if n % 2 == 0 else order[::-1]:
                result = run_once(cluster, work, path, f"bench_{tree}_{n}", batches, args)
                print(
                    f"round {n + 1} {tree}: {float(result['rate']):,.0f} spans/s, "
                    f"{float(result['rate']) / float(result['ceiling']):.2f} of COPY, "
                    f"p99 {float(result['p99']):.0f} ms",
                    flush=True,
                )
                runs.append((tree, result))
        print_rounds(runs)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
