"""Web UI benchmark: every experiment page server-rendered with 10,000 runs in an experiment.

Starts an embedded PostgreSQL, the edge (`evalkit server --no-worker`, its own process, as
in production) and the reference harness (`evalkit harness example`). Seeds a dataset of
500 arithmetic cases (two checks and three gauges each) and two experiments of 500 cases x
20 repetitions = 10,000 runs each: A on the cases as first synced, B after a re-sync that
changes some expected answers (so B has regressions and improvements against A).

- ``--seed engine`` (the default): no SQL at all; a worker (`evalkit worker`, its own
  process) runs and scores every run through the reference harness, as in production
  (about 7 minutes an experiment on the shared 2-core machine).
- ``--seed sql``: the experiments are created through the API (their 10,000 queued runs
  with them), then the benchmark itself marks the runs done and writes a trajectory and
  five scores per run with a few set-based statements (seconds, for iterating).

The dataset pages get a dataset of their own, `big@bench`, synced twice through the API:
10,000 cases (``--dataset-cases``), then a second sync that changes the expected answer of
every 10th case and every 15th (about 1,600 second versions) and leaves out every 100th
(removed by that sync), so a case's current version is not always its first.

Then, logged in through the login form as a browser is, it times each page with httpx:
the first request (cold: the experiment's score summary and the comparison's bootstrap are
computed and kept), when the comparison's statistics were ready, and N more requests
(warm), printing p50 and p95 in milliseconds.

``--only dataset`` (or ``--only experiments``) seeds and times only those pages: the dataset
pages need neither the harness nor the experiments and take about a minute.

It prints which evalkit it ran (the package directory and the newest migration), so that
two runs on two checkouts (e.g. a ``git worktree`` of an older commit, run from its own
directory with ``PYTHONPATH`` set to it) can be told apart.

    uv run python benchmarks/web_pages.py [--seed engine|sql] [--cases 500]
        [--repetitions 20] [--requests 20] [--dataset-cases 10000]
        [--only experiments|dataset]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from _stack import EVALKIT, PASSWORD, wait_http

import evalkit
from evalkit import serve
from evalkit.auth.secrets import generate_key
from evalkit.embedded import EmbeddedPostgres
from evalkit.sql import migrate

TARGET_MS = 200
EVALUATORS = {
    "exact_match": True,
    "tool_calls": {"required": ["calculator"]},
    "latency": True,
    "cost": True,
    "steps": True,
}


def cases(n: int, version: int) -> list[dict]:
    """v1 expects a wrong answer for every 15th case, v2 for every 10th."""
    found = []
    for i in range(n):
        right = str(2 * i + 1)
        wrong = (version == 1 and i % 15 == 7) or (version == 2 and i % 10 == 3)
        found.append(
            {
                "id": f"sum-{i:04d}",
                "content": {
                    "input": {"question": f"What is {i} + {i + 1}?"},
                    "expected": {"answer": right + "0" if wrong else right},
                    "tags": ["math", f"group-{i % 5}"],
                    "split": "test" if i % 4 == 0 else "train",
                    "evaluators": EVALUATORS,
                },
            }
        )
    return found


def dataset_cases(n: int, version: int) -> list[dict]:
    """The big dataset: v2 changes every 10th and 15th case and leaves out every 100th."""
    found = []
    for case in cases(n, 1):
        i = int(case["id"].split("-")[1])
        if version == 2 and i % 100 == 99:
            continue
        if version == 2 and (i % 10 == 3 or i % 15 == 7):
            case["content"]["expected"]["answer"] += " (checked)"
        found.append(case)
    return found


def start_experiment(api: httpx.Client, repetitions: int) -> int:
    created = api.post(
        "/api/experiments",
        json={"dataset": "arith@bench", "agent": "ref@bench", "repetitions": repetitions},
    )
    created.raise_for_status()
    return int(created.json()["id"])


def wait_finished(api: httpx.Client, experiment_id: int) -> None:
    while api.get(f"/api/experiments/{experiment_id}/brief").json()["status"] != "finished":
        time.sleep(0.5)


# A trajectory shaped like the reference harness's: the question, a calculator call with
# its result, the answer; token counts and cost per step.
TRAJECTORY = {
    "schema_version": "ATIF-v1.6",
    "session_id": "bench",
    "agent": {"name": "evalkit-reference-harness", "version": "1", "model_name": "calc-1"},
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "source": "user",
            "message": "What is 2 + 3?",
        },
        {
            "step_id": 2,
            "timestamp": "2026-01-01T00:00:00.400Z",
            "source": "agent",
            "model_name": "calc-1",
            "message": "Let me use my tools.",
            "reasoning_content": "The question needs a tool before I can answer.",
            "tool_calls": [
                {
                    "tool_call_id": "call-calc-1",
                    "function_name": "calculator",
                    "arguments": {"expression": "2 + 3"},
                }
            ],
            "observation": {"results": [{"source_call_id": "call-calc-1", "content": "5"}]},
            "metrics": {"prompt_tokens": 44, "completion_tokens": 12, "cost_usd": 0.000056},
        },
        {
            "step_id": 3,
            "timestamp": "2026-01-01T00:00:00.900Z",
            "source": "agent",
            "model_name": "calc-1",
            "message": "5",
            "metrics": {"prompt_tokens": 45, "completion_tokens": 1, "cost_usd": 0.000046},
        },
    ],
    "final_metrics": {
        "total_prompt_tokens": 89,
        "total_completion_tokens": 13,
        "total_cost_usd": 0.000102,
        "total_steps": 3,
    },
}

FILL_RUNS = """
UPDATE runs r
SET state = 'done', harness_status = 'succeeded', attempts = 1,
    started_at = r.created_at + interval '1 second',
    harness_done_at = r.created_at + interval '1 second' + random() * interval '3 seconds',
    finished_at = r.created_at + interval '5 seconds',
    answer = regexp_replace(v.content #>> '{expected,answer}', '0$', ''),
    output = jsonb_build_object('result', 1)
FROM case_versions v
WHERE v.id = r.case_version_id AND r.experiment_id = %(experiment)s
"""
FILL_TRAJECTORIES = """
INSERT INTO trajectories (run_id, source, body, partial, valid, errors)
SELECT id, 'harness', %(body)s::jsonb, false, true, '[]' FROM runs
WHERE experiment_id = %(experiment)s
"""
FILL_SCORES = """
INSERT INTO scores (run_id, round, name, value, kind, explanation, evaluator, raw)
SELECT r.id, 1, s.name,
       CASE s.name
           WHEN 'exact_match' THEN
               CASE WHEN r.answer = v.content #>> '{expected,answer}' THEN 1.0 ELSE 0.0 END
           WHEN 'tool_calls' THEN CASE WHEN random() < 0.97 THEN 1.0 ELSE 0.0 END
       END,
       CASE WHEN s.name IN ('exact_match', 'tool_calls') THEN 'evaluator' ELSE 'gauge' END,
       'seeded by benchmarks/web_pages.py', 'builtin:' || s.name,
       CASE s.name
           WHEN 'latency' THEN to_jsonb(extract(epoch FROM r.harness_done_at - r.started_at))
           WHEN 'cost' THEN to_jsonb(0.0001 + random() * 0.0001)
           WHEN 'steps' THEN to_jsonb(2)
       END
FROM runs r
JOIN case_versions v ON v.id = r.case_version_id
CROSS JOIN (VALUES ('exact_match'), ('tool_calls'), ('latency'), ('cost'), ('steps')) s (name)
WHERE r.experiment_id = %(experiment)s
"""
FINISH = """
UPDATE experiments SET status = 'finished', finished_at = now() WHERE id = %(experiment)s
"""


def fill_with_sql(db_url: str, experiment_id: int) -> None:
    """Every queued run of the experiment done, with a trajectory and five scores."""
    params = {"experiment": experiment_id, "body": json.dumps(TRAJECTORY)}
    with psycopg.connect(db_url) as conn:
        # Runs go from queued to done in one statement: past the transition guard.
        conn.execute("SET session_replication_role = replica")
        for statement in (FILL_RUNS, FILL_TRAJECTORIES, FILL_SCORES, FINISH):
            conn.execute(statement, params)  # type: ignore[arg-type]
        conn.execute("ANALYZE")


def timed(web: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = web.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return elapsed, response


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*EVALKIT, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", choices=("engine", "sql"), default="engine")
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--dataset-cases", type=int, default=10_000)
    parser.add_argument(
        "--only", choices=("experiments", "dataset"), help="seed and time only these pages"
    )
    args = parser.parse_args()
    runs = args.cases * args.repetitions
    experiments = args.only in (None, "experiments")
    dataset = args.only in (None, "dataset")
    head = sorted(
        p.name for p in (Path(evalkit.__file__).parent / "sql/migrations/versions").glob("0*.py")
    )[-1]
    print(f"evalkit from {Path(evalkit.__file__).parent} (newest migration {head})")

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    children: list[subprocess.Popen[bytes]] = []
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/bench"))
        migrate.upgrade(db_url)
        env = dict(
            os.environ,
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=generate_key(),
            EVALKIT_DATA_DIR=str(work / "data"),
            EVALKIT_ADMIN_PASSWORD=PASSWORD,
            EVALKIT_EGRESS_ALLOW_PRIVATE="true",
            EVALKIT_WORKER_CONCURRENCY=str(args.worker_concurrency),
        )
        port, harness_port = serve.free_port(), serve.free_port()
        children.append(spawn(["server", "--no-worker", "--port", str(port)], env))
        if experiments:
            children.append(spawn(["harness", "example", "--port", str(harness_port)], env))
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", 120)
        if experiments:
            wait_http(f"http://127.0.0.1:{harness_port}/capabilities", 120)
        if experiments and args.seed == "engine":
            children.append(spawn(["worker"], env))
        token = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=auth, timeout=120) as api:
            api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
            if dataset:
                big = "/api/workspaces/bench/datasets/big/sync"
                for version in (1, 2):
                    started = time.perf_counter()
                    body = {"cases": dataset_cases(args.dataset_cases, version)}
                    api.post(big, json=body).raise_for_status()
                    seconds = time.perf_counter() - started
                    sent = len(body["cases"])
                    print(f"dataset big, sync {version}: {sent} cases in {seconds:.0f} s")
                with psycopg.connect(db_url) as conn:
                    conn.execute("ANALYZE")
            if experiments:
                api.post(
                    "/api/workspaces/bench/agents",
                    json={
                        "name": "ref",
                        "harness_url": f"http://127.0.0.1:{harness_port}",
                        "max_concurrent_runs": 32,
                        "poll_interval": 0.05,
                    },
                ).raise_for_status()
                sync = "/api/workspaces/bench/datasets/arith/sync"
                ids = []
                for version in (1, 2):
                    api.post(sync, json={"cases": cases(args.cases, version)}).raise_for_status()
                    started = time.perf_counter()
                    experiment_id = start_experiment(api, args.repetitions)
                    if args.seed == "engine":
                        wait_finished(api, experiment_id)
                    else:
                        fill_with_sql(db_url, experiment_id)
                    seconds = time.perf_counter() - started
                    print(f"experiment {experiment_id}: {runs} runs seeded in {seconds:.0f} s")
                    ids.append(experiment_id)
                a, b = ids
                middle = api.get(f"/api/experiments/{b}/runs", params={"offset": runs // 2}).json()
                run_id = middle["runs"][0]["id"]
        load = os.getloadavg()[0]

        pages = []
        if dataset:
            ds = "/w/bench/datasets/big"
            last = (args.dataset_cases // 50 - 1) * 50
            pages += [
                ("dataset", ds),
                ("dataset, last page", f"{ds}?offset={last}"),
                ("dataset, pending", f"{ds}?state=pending"),
                ("dataset, removed", f"{ds}?state=removed"),
                ("dataset, by tag", f"{ds}?tag=group-3"),
                ("dataset, by split", f"{ds}?split=test"),
                ("dataset, id search", f"{ds}?q=42"),
            ]
        if experiments:
            pages += [
                ("experiments list", "/experiments"),
                ("list + trend of a dataset", "/experiments?dataset=arith%40bench"),
                ("experiment", f"/experiments/{b}"),
                ("experiment, last page of runs", f"/experiments/{b}?offset={runs - 50}"),
                ("experiment, runs below 0.5", f"/experiments/{b}?score=exact_match&below=0.5"),
                ("experiment, runs by tag", f"/experiments/{b}?tag=group-3"),
                ("compare", f"/experiments/{a}/compare/{b}"),
                ("compare, changed cases", f"/experiments/{a}/compare/{b}?changed=1"),
                ("run with its trajectory", f"/runs/{run_id}"),
                ("schedules", "/schedules"),
            ]
        rows = []
        with httpx.Client(base_url=url, timeout=300) as web:
            login = web.post(
                "/login", data={"username": "admin", "password": PASSWORD, "next": "/"}
            )
            if login.status_code != 303:
                raise SystemExit(f"login failed: {login.status_code}")
            for name, path in pages:
                first, response = timed(web, path)
                ready = None
                if "reloads by itself" in response.text:  # the comparison's statistics
                    began = time.perf_counter() - first / 1000
                    while "reloads by itself" in response.text:
                        time.sleep(0.25)
                        _, response = timed(web, path)
                    ready = (time.perf_counter() - began) * 1000
                warm = [timed(web, path)[0] for _ in range(args.requests)]
                rows.append((name, first, ready, statistics.median(warm), p95(warm)))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"{runs if experiments else 0} runs per experiment (seeded by {args.seed}), "
        f"{args.dataset_cases if dataset else 0} cases in the big dataset; {args.requests} warm "
        f"requests per page, in ms; load average {load:.1f} on {os.cpu_count()} cores"
    )
    print(f"{'page':<32}{'first':>8}{'stats in':>10}{'p50':>8}{'p95':>8}")
    for name, first, ready, p50, top in rows:
        stats_in = f"{ready:>10.0f}" if ready is not None else f"{'':>10}"
        print(f"{name:<32}{first:>8.0f}{stats_in}{p50:>8.0f}{top:>8.0f}")


if __name__ == "__main__":
    main()
