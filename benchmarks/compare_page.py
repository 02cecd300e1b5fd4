"""The compare page's HTTP response, old tree against new: two experiments of 4 runs each
and two of 10,000 runs each, each edge fresh (nothing kept in its memory).

Starts an embedded PostgreSQL and the reference harness, seeds (through a setup edge of
this tree, then SQL, as ``web_pages.py --seed sql`` does) a dataset of 500 arithmetic cases
with two experiments of 500 cases x 20 repetitions (five scores a run: two checks, three
gauges), and a dataset of 4 cases with two experiments of one run per case. Then, for each
round and each tree in turn (old, new, new, old, ...), it starts that tree's edge
(``evalkit server --no-worker``, its own process, with ``PYTHONPATH`` set to the tree), logs
in through the login form and times with httpx:

- ``small``: the first view of the small compare page, on the fresh edge (so it pays for
  whatever a server's first comparison costs, numpy's import among it);
- ``10k first``: the first response of the big compare page;
- ``10k complete``: until a response carried the whole table (the intervals and McNemar's
  test), asking again every 0.1 s while a page said it was still computing;
- ``10k warm``: the median of five more requests;
- ``edge CPU`` and ``db CPU``: the CPU time the edge process and PostgreSQL's processes
  used from the first request to the complete page (what the load of a shared machine
  does not stretch the way it stretches wall time).

A page is complete when its table of scores is there (``McNemar p``). It prints each
round's figures, the load average before the round, and the medians with their ratio
(old / new).

    uv run python benchmarks/compare_page.py --against DIR [--rounds 3]
        [--cases 500] [--repetitions 20]

``DIR`` is a checkout of the older code (``git worktree add --detach DIR REV``, or
``git archive REV | tar -x -C DIR``), run with this tree's Python and packages. Without
``--against`` only this tree is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _stack import PASSWORD, migrated_database, wait_http
from web_pages import cases, fill_with_sql

from evalkit import serve
from evalkit.auth.secrets import generate_key

HERE = Path(__file__).resolve().parent.parent
COMPLETE = "McNemar p</th>"
LABELS = ("small", "10k first", "10k complete", "10k warm", "edge CPU", "db CPU")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> float:
    """User and system CPU a process has used, in ms (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


def db_cpu_ms(postmaster: int) -> float:
    """CPU used by the PostgreSQL server's processes (the postmaster's children)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) * 1000 / TICKS
    return total


def evalkit_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from evalkit.cli import main; main()", *args]


def spawn(tree: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        evalkit_command(*args),
        env={**env, "PYTHONPATH": str(tree)},
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()


def start_and_fill(
    api: httpx.Client, db_url: str, dataset: str, repetitions: int, case_ids: list[str] | None
) -> int:
    body: dict[str, object] = {"dataset": dataset, "agent": "ref@bench"}
    body["repetitions"] = repetitions
    if case_ids:
        body["case_ids"] = case_ids
    created = api.post("/api/experiments", json=body)
    created.raise_for_status()
    experiment_id = int(created.json()["id"])
    fill_with_sql(db_url, experiment_id)
    return experiment_id


def seed(url: str, db_url: str, harness_url: str, n_cases: int, repetitions: int) -> dict:
    token = httpx.post(
        f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
    ).json()["token"]
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300
    ) as api:
        api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
        agent = {"name": "ref", "harness_url": harness_url, "max_concurrent_runs": 32}
        api.post("/api/workspaces/bench/agents", json=agent).raise_for_status()
        ids: dict[str, list[int]] = {"big": [], "small": []}
        for version in (1, 2):
            for name, n, reps in (("big", n_cases, repetitions), ("small", 4, 1)):
                sync = f"/api/workspaces/bench/datasets/{name}/sync"
                found = cases(n, version)
                for case in found:  # case ids are unique within a workspace
                    case["id"] = f"{name}-{case['id']}"
                api.post(sync, json={"cases": found}).raise_for_status()
                started = time.perf_counter()
                ids[name].append(start_and_fill(api, db_url, f"{name}@bench", reps, None))
                seconds = time.perf_counter() - started
                print(f"experiment {ids[name][-1]} ({name}): {n * reps} runs in {seconds:.0f} s")
    return ids


def timed_get(web: httpx.Client, path: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = web.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return elapsed, response.text


def one_round(tree: Path, env: dict[str, str], ids: dict, postmaster: int) -> dict[str, float]:
    port = serve.free_port()
    edge = spawn(tree, ["server", "--no-worker", "--port", str(port)], env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/healthz", 120)
        with httpx.Client(base_url=url, timeout=300) as web:
            login = web.post(
                "/login", data={"username": "admin", "password": PASSWORD, "next": "/"}
            )
            if login.status_code != 303:
                raise SystemExit(f"login failed: {login.status_code}")
            (sa, sb), (ba, bb) = ids["small"], ids["big"]
            small, text = timed_get(web, f"/experiments/{sa}/compare/{sb}")
            small_complete = COMPLETE in text
            path = f"/experiments/{ba}/compare/{bb}"
            edge_before, db_before = cpu_ms(edge.pid), db_cpu_ms(postmaster)
            began = time.perf_counter()
            first, text = timed_get(web, path)
            while COMPLETE not in text:
                time.sleep(0.1)
                _, text = timed_get(web, path)
            complete = (time.perf_counter() - began) * 1000
            edge_cpu = cpu_ms(edge.pid) - edge_before
            db_cpu = db_cpu_ms(postmaster) - db_before
            warm = statistics.median(timed_get(web, path)[0] for _ in range(5))
    finally:
        stop(edge)
    found = dict(zip(LABELS, (small, first, complete, warm, edge_cpu, db_cpu), strict=True))
    found["small complete"] = float(small_complete)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="a checkout of the older code")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repetitions", type=int, default=20)
    args = parser.parse_args()
    trees = {"new": HERE}
    if args.against is not None:
        trees = {"old": args.against.resolve(), "new": HERE}
    harness = None
    with migrated_database("evalkit-compare-page-") as (work, cluster, db_url):
        postmaster = int((cluster.pgdata / "postmaster.pid").read_text().split()[0])
        try:
            env = dict(
                os.environ,
                EVALKIT_DATABASE_URL=db_url,
                EVALKIT_ENCRYPTION_KEY=generate_key(),
                EVALKIT_DATA_DIR=str(work / "data"),
                EVALKIT_ADMIN_PASSWORD=PASSWORD,
                EVALKIT_EGRESS_ALLOW_PRIVATE="true",
            )
            harness_port, port = serve.free_port(), serve.free_port()
            harness = spawn(HERE, ["harness", "example", "--port", str(harness_port)], env)
            setup = spawn(HERE, ["server", "--no-worker", "--port", str(port)], env)
            try:
                wait_http(f"http://127.0.0.1:{port}/healthz", 120)
                harness_url = f"http://127.0.0.1:{harness_port}"
                wait_http(harness_url + "/capabilities", 120)
                setup_url = f"http://127.0.0.1:{port}"
                ids = seed(setup_url, db_url, harness_url, args.cases, args.repetitions)
            finally:
                stop(setup)
            results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            order = list(trees)
            print(f"\n{'round':<7}{'tree':<6}{'load':>6}" + "".join(f"{x:>14}" for x in LABELS))
            for round_ in range(1, args.rounds + 1):
                for name in order:
                    load = os.getloadavg()[0]
                    found = one_round(trees[name], env, ids, postmaster)
                    results[name].append(found)
                    row = "".join(f"{found[x]:>14.0f}" for x in LABELS)
                    whole = "" if found["small complete"] else "  (small: not complete)"
                    print(f"{round_:<7}{name:<6}{load:>6.1f}{row}{whole}", flush=True)
                order.reverse()
        finally:
            if harness is not None:
                stop(harness)
    runs = args.cases * args.repetitions
    print(f"\nmedians in ms (two {runs:,}-run experiments, two of 4 runs), {os.cpu_count()} cores")
    ratio_head = "   old/new" if len(trees) > 1 else ""
    print(f"{'':<14}" + "".join(f"{name:>10}" for name in trees) + ratio_head)
    for label in LABELS:
        medians = [statistics.median(r[label] for r in results[name]) for name in trees]
        ratio = f"{medians[0] / medians[1]:>10.1f}" if len(medians) > 1 else ""
        print(f"{label:<14}" + "".join(f"{m:>10.0f}" for m in medians) + ratio)
    complete = [sum(r["small complete"] for r in results[name]) for name in trees]
    counted = (f"{name} {int(c)} of {args.rounds}" for name, c in zip(trees, complete, strict=True))
    print("small compare page complete on its first view: " + ", ".join(counted))


if __name__ == "__main__":
    main()
