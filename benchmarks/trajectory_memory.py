"""Peak memory of a worker storing one large trajectory, stage by stage.

One valid ATIF trajectory of 10,083 steps (about 19 MB) is served by a plain HTTP server on
loopback. A fresh process per measurement then takes the worker's path through evalkit's
own code: the harness client reads it (``HarnessClient.trajectory``), the run state machine
collects it (``machine.step`` in ``collecting``), the store decodes and validates it
(``store.runs._checked``), it is written with the statement's casts into a table shaped like
``trajectories`` on an embedded PostgreSQL, and read back as scoring reads it. Each stage
prints the process's peak RSS (``ru_maxrss``) above its baseline after the imports.

    uv run python benchmarks/trajectory_memory.py [--rounds 3]

With ``--against DIR`` (a checkout of an older commit, e.g. a ``git worktree``), the
measurement runs ``--rounds`` times with each tree's ``evalkit`` on ``PYTHONPATH``,
alternating old and new, and prints the median peak of each stage side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

STAGES = ("read", "collect", "validate", "write", "read back")
STEPS = 10_083


def big_trajectory(steps: int = STEPS, content_bytes: int = 1_500) -> bytes:
    """A valid trajectory: the reference agent's, its tool step repeated ``steps - 2``
    times with a ``content_bytes`` observation each."""
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


def serve_file(path: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    data = path.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(harness_url: str, db_url: str) -> None:
    """The child: one pass through the stages, printing each stage's peak above baseline."""
    import httpx
    import psycopg

    from evalkit.harness.client import HarnessClient
    from evalkit.model.harness import Capabilities, Provides
    from evalkit.model.runs import RunSettings, RunWork
    from evalkit.runs import machine
    from evalkit.store import runs as store

    settings = RunSettings(run_timeout=60, poll_interval=1, stop_grace=1, trajectory_wait=1)
    work = RunWork(
        run_id=1,
        experiment_id=1,
        state="collecting",
        case_id="big",
        repetition=1,
        input={},
        settings=settings,
        harness_run_id="r1",
    )
    async with (
        httpx.AsyncClient(timeout=60) as http,
        await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn,
    ):
        await conn.execute(
            "CREATE TEMP TABLE t (source text, body jsonb, raw text, partial boolean, "
            "valid boolean, errors jsonb)"
        )
        harness = HarnessClient(harness_url, None, http)
        env = machine.Env(
            harness=harness,
            capabilities=Capabilities(provides=Provides(trajectory=True)),
            fixture_bytes=None,  # type: ignore[arg-type]
        )
        base = peak_mb()
        peaks = {}
        raw = await harness.trajectory("r1")
        peaks["read"] = peak_mb() - base
        del raw
        step = await machine.step(work, env)
        assert step.transition is not None and step.transition.trajectory is not None
        record = step.transition.trajectory
        del step
        peaks["collect"] = peak_mb() - base
        checked = store._checked(record)
        assert checked["valid"], checked["errors"]
        peaks["validate"] = peak_mb() - base
        await conn.execute(
            "INSERT INTO t SELECT %(source)s::text, %(body)s::jsonb, %(raw)s::text, "
            "%(partial)s::boolean, %(valid)s::boolean, %(errors)s::jsonb",
            checked,
        )
        del checked, record
        peaks["write"] = peak_mb() - base
        cursor = await conn.execute("SELECT body FROM t")
        (body,) = await cursor.fetchone()  # type: ignore[misc]
        assert len(body["steps"]) == STEPS
        del body, cursor
        peaks["read back"] = peak_mb() - base
    print(" ".join(f"{peaks[s]:.0f}" for s in STAGES))


def run_child(tree: Path, harness_url: str, db_url: str) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", harness_url, db_url],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    ).stdout
    return [float(x) for x in out.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(measure(*args.child))
        return

    from evalkit.embedded import EmbeddedPostgres

    here = Path(__file__).resolve().parent.parent
    trees = {"new": here}
    if args.against:
        trees = {"old": args.against.resolve(), "new": here}
    with tempfile.TemporaryDirectory(prefix="evalkit-trajectory-memory-") as tmp:
        path = Path(tmp) / "trajectory.json"
        path.write_bytes(big_trajectory())
        print(f"trajectory: {path.stat().st_size / 1e6:.1f} MB, {STEPS} steps")
        server, url = serve_file(path)
        pg = EmbeddedPostgres(Path(tmp) / "pg", cleanup="delete")
        db_url = pg.start()
        try:
            peaks: dict[str, list[list[float]]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    peaks[name].append(run_child(tree, url, db_url))
        finally:
            pg.stop()
            server.shutdown()
    print("peak RSS above the process's baseline, MB (median of", args.rounds, "rounds)")
    print(f"{'stage':<10}" + "".join(f"{name:>8}" for name in trees))
    for i, stage in enumerate(STAGES):
        medians = [statistics.median(r[i] for r in peaks[name]) for name in trees]
        print(f"{stage:<10}" + "".join(f"{m:>8.0f}" for m in medians))


if __name__ == "__main__":
    main()
