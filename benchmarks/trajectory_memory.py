"""Peak memory of one large trajectory on the worker's path and the SDK's upload path,
phase by phase, old tree against new.

Three valid ATIF trajectories of 10,083 steps are served by a plain HTTP server on loopback:

- ``long``: ASCII, each tool step with a 1.5 KB observation (about 19 MB);
- ``long-emoji``: the same with one emoji in one observation (a Python str of it takes
  4 bytes a character);
- ``dense``: short texts with an em dash, two tool calls, two results and metrics with
  token ids and logprobs in every step (about 13 MB: many small values).

A fresh process per measurement takes evalkit's own code through each phase:

- worker: ``fetch`` (``HarnessClient.trajectory``), ``collect`` (``machine.step`` in
  ``collecting``), ``validate`` (``store.runs._checked``), ``write`` (the checked fields
  with the statement's casts, into a table shaped like ``trajectories`` on an embedded
  PostgreSQL, through the tree's ``db.Database`` pool), ``read back`` (the stored
  trajectory as scoring reads it, then ``store.scores.context_from_row``), then each
  built-in evaluator of the trajectory, the judge's prompt (``build_messages``) and a
  remote evaluator's request (``build_request``, encoded);
- SDK upload (``POST /api/runs/{id}/transition``, whose body carries the trajectory as a
  JSON string): ``upload decode`` (the body into ``wire.Transition``), ``upload validate``
  and ``upload write``.

``kept after`` is what the process still holds once the run is scored and its objects
dropped, with the pool's connection open (libpq keeps its buffers as large as the largest
message a connection carried). Each other phase prints its peak above the process's
baseline after the imports: the peak RSS (``VmHWM``, reset before each phase through
``/proc/self/clear_refs``; it counts libpq's buffers, which tracemalloc does not see) and,
in a second process, tracemalloc's peak of Python allocations (deterministic). Figures are
MB and the ratio to the trajectory's size.

    uv run python benchmarks/trajectory_memory.py [--rounds 3] [--against DIR]

With ``--against DIR`` (a checkout of an older commit, e.g. ``git archive`` unpacked), each
RSS measurement runs ``--rounds`` times with each tree's ``evalkit`` on ``PYTHONPATH``,
alternating old and new, and prints the medians side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.server
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

STEPS = 10_083
SHAPES = ("long", "long-emoji", "dense")
WORKER = ("fetch", "collect", "validate", "write", "read back")
EVALUATORS = ("tool_calls", "max_steps", "latency", "tokens", "cost", "steps", "tool_call_count")
SCORING = (*EVALUATORS, "judge prompt", "remote request", "kept after")
UPLOAD = ("upload decode", "upload validate", "upload write")
PHASES = (*WORKER, *SCORING, *UPLOAD)
CONFIGS: dict[str, Any] = {"tool_calls": {"required": ["calculator"]}, "max_steps": 100_000}


def long_trajectory(steps: int = STEPS, content_bytes: int = 1_500) -> bytes:
    """The reference agent's trajectory, its tool step repeated ``steps - 2`` times with a
    ``content_bytes`` observation each."""
    import msgspec

    from evalkit.harness import _agent

    work = _agent.Work(question="What is 2 + 3?", answer="5", expression="2 + 3", result="5")
    doc = _agent.trajectory(
        work,
        session_id="s",
        model=None,
        started=0.0,
        finished=1.0,
        outcome="succeeded",
        token_usage=False,
    )
    user, tool_step, final = doc["steps"]
    filler = ("lorem ipsum dolor sit amet " * (content_bytes // 27 + 1))[:content_bytes]
    body = [user]
    for n in range(2, steps):
        call = dict(tool_step["tool_calls"][0], tool_call_id=f"call-{n}")
        result = {"source_call_id": f"call-{n}", "content": f"{n} {filler}"}
        body.append(
            dict(tool_step, step_id=n, tool_calls=[call], observation={"results": [result]})
        )
    body.append(dict(final, step_id=steps))
    doc["steps"] = body
    return msgspec.json.encode(doc)


def dense_trajectory(steps: int = STEPS) -> bytes:
    """Many small values: short texts (with an em dash), two tool calls and two results per
    step, metrics with eight token ids and logprobs."""
    import msgspec

    sentence = "read the file, then check the totals \u2014 the answer is in section 4"
    words = sentence.split(" ")

    def text(n: int, count: int) -> str:
        return " ".join(words[(n + i) % len(words)] for i in range(count))

    body: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": text(0, 30)}]
    for n in range(2, steps):
        calls = [
            {
                "tool_call_id": f"c{n}-{j}",
                "function_name": "calculator" if j else "read_file",
                "arguments": {"path": f"src/m{n % 97}/f{j}.py", "start": n % 500, "end": 40},
            }
            for j in range(2)
        ]
        results = [
            {"source_call_id": c["tool_call_id"], "content": text(n + j, 35)}
            for j, c in enumerate(calls)
        ]
        body.append(
            {
                "step_id": n,
                "timestamp": f"2026-01-05T09:{(n // 60) % 60:02d}:{n % 60:02d}Z",
                "source": "agent",
                "model_name": "gpt-test",
                "message": text(n, 25),
                "reasoning_content": text(n + 3, 30),
                "tool_calls": calls,
                "observation": {"results": results},
                "metrics": {
                    "prompt_tokens": 1000 + n,
                    "completion_tokens": 50 + n % 30,
                    "cached_tokens": 500,
                    "cost_usd": 0.0012,
                    "completion_token_ids": [1000 + i for i in range(8)],
                    "logprobs": [-0.01 * (i + 1) for i in range(8)],
                },
            }
        )
    body.append({"step_id": steps, "source": "agent", "message": "done"})
    doc = {
        "schema_version": "ATIF-v1.6",
        "session_id": "s",
        "agent": {"name": "bench", "version": "1"},
        "steps": body,
        "final_metrics": {"total_steps": steps},
    }
    return msgspec.json.encode(doc)


def make(shape: str) -> bytes:
    if shape == "dense":
        return dense_trajectory()
    data = long_trajectory()
    if shape == "long-emoji":
        data = data.replace(b"lorem", "l\U0001f600rem".encode(), 1)
    return data


def serve(trajectories: dict[str, bytes]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """``GET /runs/{shape}/trajectory`` answers that shape's bytes."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = trajectories[self.path.split("/")[2]]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# --------------------------------------------------------------------------- the child


class Meter:
    """Peak memory of one phase above the baseline, by RSS or by tracemalloc."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced
        gc.collect()
        if traced:
            tracemalloc.start()
        self.base = self._now()

    @staticmethod
    def _status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field} in /proc/self/status")

    def _now(self) -> int:
        return tracemalloc.get_traced_memory()[0] if self.traced else self._status("VmRSS")

    def start(self) -> None:
        gc.collect()
        if self.traced:
            tracemalloc.reset_peak()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current RSS

    def kept(self) -> float:
        """What the process still holds above the baseline (not a peak)."""
        gc.collect()
        return max(0, self._now() - self.base) / 1e6

    def peak(self) -> float:
        top = tracemalloc.get_traced_memory()[1] if self.traced else self._status("VmHWM")
        return max(0, top - self.base) / 1e6


async def measure(harness_url: str, db_url: str, shape: str, path: str, traced: bool) -> None:
    """One pass through the phases of ``path`` (worker or upload), printing each phase's
    peak (MB) above the baseline. The statements go through the tree's own pool
    (``db.Database``, one connection), as the worker's do."""

    from evalkit import db
    from evalkit.harness.client import HarnessClient
    from evalkit.http1 import Http1Client
    from evalkit.sql import queries

    table = f"bench_trajectories_{os.getpid()}"
    statements = {
        "bench_create": f"CREATE TABLE {table} (source text, body jsonb, raw text, "
        "partial boolean, valid boolean, errors jsonb)",
        "bench_drop": f"DROP TABLE {table}",
        "bench_insert": f"INSERT INTO {table} SELECT %(source)s::text, %(body)s::jsonb, "
        "%(raw)s::text, %(partial)s::boolean, %(valid)s::boolean, %(errors)s::jsonb",
        # as each tree's score_context_get reads it: jsonb decoded by psycopg (before), or
        # a valid one cast to json for the caller's decoder (Conn.one_decoding_json)
        "bench_read_jsonb": f"SELECT body AS trajectory, valid FROM {table}",
        "bench_read_json": f"SELECT CASE WHEN valid THEN body::json END AS trajectory, valid "
        f"FROM {table}",
    }
    queries.update(statements)  # type: ignore[arg-type]
    database = db.Database(db_url, min_size=1, max_size=1)
    await database.open()
    try:
        async with database.connection() as conn:
            await conn.execute("bench_create")
        async with Http1Client(None, timeout=60, connect_timeout=60) as http:
            harness = HarnessClient(harness_url, None, http)
            if path == "worker":
                peaks = await worker_path(harness, database, shape, traced)
            else:
                peaks = await upload_path(harness, database, shape, traced)
        async with database.connection() as conn:
            await conn.execute("bench_drop")
    finally:
        await database.close()
    print(" ".join(f"{peak:.1f}" for peak in peaks.values()))


class Phases:
    def __init__(self, traced: bool) -> None:
        self.meter = Meter(traced)
        self.peaks: dict[str, float] = {}

    async def run(self, name: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        self.meter.start()
        result = await fn(*args)
        self.peaks[name] = self.meter.peak()
        return result


async def validate(record: Any) -> Any:
    from evalkit.store import runs as store

    checked = store._checked(record)
    assert checked["valid"], checked["errors"]
    return checked


async def write(database: Any, checked: dict[str, Any]) -> None:
    async with database.connection() as conn:
        await conn.execute("bench_insert", **checked)


async def worker_path(harness: Any, database: Any, shape: str, traced: bool) -> dict[str, float]:
    import msgspec

    from evalkit.cases.model import JudgeConfig
    from evalkit.model import runs as wire
    from evalkit.model.harness import Capabilities, Provides
    from evalkit.runs import machine
    from evalkit.scoring import remote
    from evalkit.scoring.builtins import BUILTINS
    from evalkit.scoring.judge_prompt import build_messages

    settings = wire.RunSettings(run_timeout=60, poll_interval=1, stop_grace=1, trajectory_wait=1)
    work = wire.RunWork(
        run_id=1,
        experiment_id=1,
        state="collecting",
        case_id="big",
        repetition=1,
        input={},
        settings=settings,
        harness_run_id=shape,
    )
    env = machine.Env(
        harness=harness,
        capabilities=Capabilities(provides=Provides(trajectory=True)),
        fixture_bytes=None,  # type: ignore[arg-type]
    )

    async def fetch() -> None:
        await harness.trajectory(shape)

    async def collect() -> Any:
        step = await machine.step(work, env)
        assert step.transition is not None and step.transition.trajectory is not None
        return step.transition.trajectory

    async def evaluate(name: str, ctx: Any) -> None:
        items = await BUILTINS[name](ctx, CONFIGS.get(name, True))
        assert items[0].error is None, items

    async def judge(ctx: Any) -> None:
        build_messages(ctx, JudgeConfig(rubric="r"), plain=False)

    async def remote_request(ctx: Any) -> None:
        msgspec.json.encode(remote.build_request(ctx, "x", {}))

    phases = Phases(traced)
    await phases.run("fetch", fetch)
    record = await phases.run("collect", collect)
    checked = await phases.run("validate", validate, record)
    del record
    await phases.run("write", write, database, checked)
    del checked
    ctx = await phases.run("read back", read_back, database)
    for name in EVALUATORS:
        await phases.run(name, evaluate, name, ctx)
    await phases.run("judge prompt", judge, ctx)
    await phases.run("remote request", remote_request, ctx)
    del ctx
    phases.peaks["kept after"] = phases.meter.kept()  # the pool's connections still open
    return phases.peaks


async def read_back(database: Any) -> Any:
    """The stored trajectory as each tree's ``score_context_get`` reads it, then
    ``context_from_row``."""
    from evalkit.store import scores

    decoder = getattr(scores, "_decode_trajectory", None)
    async with database.connection() as conn:
        if decoder is not None:
            row = await conn.one_decoding_json("bench_read_json", decoder)
        else:
            row = await conn.one("bench_read_jsonb")
    assert row is not None
    return scores.context_from_row(
        {**CONTEXT_ROW, "trajectory": row["trajectory"], "trajectory_valid": row["valid"]}
    )


CONTEXT_ROW: dict[str, Any] = {
    "run_id": 1,
    "experiment_id": 1,
    "agent_workspace_id": 1,
    "case_id": "big",
    "repetition": 1,
    "content": {"input": {}},
    "target_content": None,
    "answer": "5",
    "output": None,
    "capabilities": {"provides": {"trajectory": True}},
    "agent_provides": {"tool_calls": True, "token_usage": True, "thinking": True},
    "model": None,
    "started_at": None,
    "finished_at": None,
    "state": "scoring",
    "harness_status": "succeeded",
    "timed_out": False,
}


async def upload_path(harness: Any, database: Any, shape: str, traced: bool) -> dict[str, float]:
    """The SDK's upload: the trajectory as a JSON string inside the transition's body, as
    the edge has read it (the baseline includes the body)."""
    import msgspec

    from evalkit.model import runs as wire

    text = (await harness.trajectory(shape)).decode()
    body = msgspec.json.encode(
        wire.Transition(
            run_id=1,
            from_state="collecting",
            to_state="scoring",
            trajectory=wire.TrajectoryRecord(source="sdk", raw=text),
        )
    )
    del text
    decoder = msgspec.json.Decoder(wire.Transition)

    async def decode(body: bytes) -> Any:
        return decoder.decode(body)

    phases = Phases(traced)
    transition = await phases.run("upload decode", decode, body)
    del body
    checked = await phases.run("upload validate", validate, transition.trajectory)
    del transition
    await phases.run("upload write", write, database, checked)
    return phases.peaks


def run_child(tree: Path, url: str, db_url: str, shape: str, traced: bool) -> list[float]:
    """Both paths, each in a fresh process: the peaks of every phase, in PHASES order."""
    return [
        peak
        for path in ("worker", "upload")
        for peak in run_path(tree, url, db_url, shape, path, traced)
    ]


def run_path(tree: Path, url: str, db_url: str, shape: str, path: str, traced: bool) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    mode = "traced" if traced else "rss"
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, db_url, shape, path, mode],
        env=env,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    if done.returncode != 0:
        sys.exit(f"the {tree} child failed on {shape}:\n{done.stderr}")
    return [float(x) for x in done.stdout.split()]


# --------------------------------------------------------------------------- the parent


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    parser.add_argument("--shape", choices=SHAPES, action="append", help="default: all")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, db_url, shape, path, mode = args.child
        asyncio.run(measure(url, db_url, shape, path, mode == "traced"))
        return

    from evalkit.embedded import EmbeddedPostgres

    here = Path(__file__).resolve().parent.parent
    trees = {"old": args.against.resolve(), "new": here} if args.against else {"new": here}
    shapes = args.shape or list(SHAPES)
    trajectories = {shape: make(shape) for shape in shapes}
    server, url = serve(trajectories)
    with tempfile.TemporaryDirectory(prefix="evalkit-trajectory-memory-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg", cleanup="delete")
        db_url = pg.start()
        try:
            for shape in shapes:
                size = len(trajectories[shape]) / 1e6
                rss: dict[str, list[list[float]]] = {name: [] for name in trees}
                for _ in range(args.rounds):
                    for name, tree in trees.items():
                        rss[name].append(run_child(tree, url, db_url, shape, traced=False))
                traced = {
                    name: run_child(tree, url, db_url, shape, traced=True)
                    for name, tree in trees.items()
                }
                report(shape, size, trees, rss, traced, args.rounds)
        finally:
            pg.stop()
            server.shutdown()
    with open("/proc/loadavg") as f:
        print(f"load average: {f.read().strip()}")


def report(
    shape: str,
    size: float,
    trees: dict[str, Path],
    rss: dict[str, list[list[float]]],
    traced: dict[str, list[float]],
    rounds: int,
) -> None:
    print(f"\n{shape}: {size:.1f} MB, {STEPS} steps")
    print(f"peak above baseline: RSS (median of {rounds}) and tracemalloc; MB and x the size")
    head = "".join(f"{name + ' rss':>14}{name + ' traced':>16}" for name in trees)
    print(f"{'phase':<16}{head}")
    for i, phase in enumerate(PHASES):
        cells = []
        for name in trees:
            r = statistics.median(run[i] for run in rss[name])
            t = traced[name][i]
            cells.append(f"{r:>7.0f} {r / size:>5.1f}x{t:>9.0f} {t / size:>5.1f}x")
        print(f"{phase:<16}" + "".join(cells))


if __name__ == "__main__":
    main()
