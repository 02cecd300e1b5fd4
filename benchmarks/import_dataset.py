"""Import benchmark: a 5,000-example dataset through `evalkit import`, against its ceiling.

For each peer it serves a dataset of ``--examples`` examples, then, for ``--rounds``
rounds in alternating order, times three separate processes:

- ``ceiling``: the least an import can do, as a plain script. It fetches the same pages with
  httpx (same concurrency) and dumps each example's JSON as a YAML file. It maps nothing,
  checks nothing and keeps nothing for a second import;
- ``first import``: ``evalkit import <peer>`` into an empty suite;
- ``re-import``: the same command again, nothing changed (it reads every file back).

Peers: ``langfuse``, the loopback server of tests/importers/langfuse_api.py that follows
Langfuse's public API (100 items a page), and ``phoenix``, a real Phoenix started from the
tests' cached venv (tests/importers/phoenix.py: built on first use, then 10 to 60 s to
start), seeded through Phoenix's own client, with three splits.

    uv run python benchmarks/import_dataset.py [--examples 5000] [--rounds 3]
                                               [--peers langfuse,phoenix]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.importers.langfuse_api import PUBLIC_KEY, SECRET_KEY, LangfuseApi  # noqa: E402

TARGET_SECONDS = 30.0
EVALKIT = str(Path(sys.executable).parent / "evalkit")
SPLITS = ("train", "test", "hard")

CEILING_LANGFUSE = """
import sys, httpx, yaml
from concurrent.futures import ThreadPoolExecutor
url, name, out = sys.argv[1:4]
c = httpx.Client(base_url=url, auth=(sys.argv[4], sys.argv[5]), timeout=60)
c.get(f"/api/public/v2/datasets/{name}").raise_for_status()
def page(n):
    r = c.get("/api/public/dataset-items", params={"datasetName": name, "page": n, "limit": 100})
    r.raise_for_status()
    return r.json()
first = page(1)
items = list(first["data"])
with ThreadPoolExecutor(4) as pool:
    for p in pool.map(page, range(2, first["meta"]["totalPages"] + 1)):
        items.extend(p["data"])
for item in items:
    with open(f"{out}/{item['id']}.yaml", "w") as f:
        f.write(yaml.dump(item, Dumper=yaml.CSafeDumper, sort_keys=False))
"""

CEILING_PHOENIX = """
import sys, httpx, yaml
url, name, out, key = sys.argv[1:5]
c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
ds = c.get("/v1/datasets", params={"name": name}).json()["data"][0]
data = c.get(f"/v1/datasets/{ds['id']}/examples").json()["data"]
for s in c.get(f"/v1/datasets/{ds['id']}/splits", params={"limit": 1000}).json()["data"]:
    c.get(f"/v1/datasets/{ds['id']}/examples",
          params={"version_id": data["version_id"], "split": s["id"]}).raise_for_status()
for n, ex in enumerate(data["examples"]):
    with open(f"{out}/{n}.yaml", "w") as f:
        f.write(yaml.dump(ex, Dumper=yaml.CSafeDumper, sort_keys=False))
"""


def example(n: int, rng: random.Random) -> dict:
    words = " ".join(rng.choice(("refund", "order", "invoice", "ship", "days")) for _ in range(12))
    return {
        "input": {"question": f"Question {n}: {words}?", "customer": f"c-{n % 97}"},
        "output": {"answer": f"Answer {n}: {words[:40]}"},
        "metadata": {"tags": [rng.choice(("billing", "shipping"))], "difficulty": n % 5},
    }


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stdout}\n{done.stderr}")
    return elapsed


def run_rounds(
    label: str,
    rounds: int,
    ceiling: Callable[[Path], list[str]],
    importer: Callable[[Path], list[str]],
    env: dict[str, str],
    examples: int,
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"ceiling": [], "first import": [], "re-import": []}
    for round_ in range(rounds):
        work = Path(tempfile.mkdtemp(prefix="evalkit-import-bench-"))
        try:
            raw, suite = work / "raw", work / "cases" / "bench"
            raw.mkdir()

            def measure_ceiling(raw: Path = raw) -> None:
                times["ceiling"].append(timed(ceiling(raw), env))

            def measure_imports(suite: Path = suite) -> None:
                times["first import"].append(timed(importer(suite), env))
                files = sum(1 for p in suite.glob("*.yaml") if not p.name.startswith("."))
                assert files == examples, f"{files} case files, not {examples}"
                times["re-import"].append(timed(importer(suite), env))

            order = (measure_ceiling, measure_imports)
            for step in order if round_ % 2 == 0 else reversed(order):
                load = loadavg()
                step()
                print(f"  {label} round {round_ + 1} {step.__name__}: load {load}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return times


def report(label: str, times: dict[str, list[float]]) -> None:
    ceiling = statistics.median(times["ceiling"])
    print(f"\n{label}: seconds per run (median), target {TARGET_SECONDS:.0f} s")
    for name, values in times.items():
        median = statistics.median(values)
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"  {name:13} {median:6.2f}  [{shown}]  x{median / ceiling:.2f} of the ceiling, "
            f"{median / TARGET_SECONDS:.2f} of the target"
        )


def bench_langfuse(examples: int, rounds: int) -> None:
    rng = random.Random(5)
    env = {**os.environ, "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY, "LANGFUSE_SECRET_KEY": SECRET_KEY}
    with LangfuseApi() as api:
        api.add_dataset("bench")
        for n in range(examples):
            e = example(n, rng)
            api.put_item("bench", f"item-{n:05d}", input=e["input"], expected=e["output"],
                         metadata=e["metadata"])  # fmt: skip
        times = run_rounds(
            "langfuse",
            rounds,
            lambda raw: [
                sys.executable,
                "-c",
                CEILING_LANGFUSE,
                api.url,
                "bench",
                str(raw),
                PUBLIC_KEY,
                SECRET_KEY,
            ],
            lambda suite: [
                EVALKIT,
                "import",
                "langfuse",
                "--url",
                api.url,
                "--dataset",
                "bench",
                "--into",
                str(suite),
            ],
            env,
            examples,
        )
    report(f"langfuse-shaped loopback server, {examples:,} items", times)


def bench_phoenix(examples: int, rounds: int) -> None:
    from tests.importers.phoenix import seed, start_phoenix

    rng = random.Random(5)
    rows = []
    for n in range(examples):
        row = example(n, rng)
        row["splits"] = [SPLITS[n % 3]] + (["hard"] if n % 7 == 0 and n % 3 != 2 else [])
        rows.append(row)
    workdir = Path(tempfile.mkdtemp(prefix="evalkit-bench-phoenix-"))
    started = time.perf_counter()
    server = start_phoenix(workdir)
    print(f"  phoenix up in {time.perf_counter() - started:.1f} s", flush=True)
    try:
        started = time.perf_counter()
        seed(server, [{"name": "bench", "examples": rows}])
        print(f"  seeded {examples:,} examples in {time.perf_counter() - started:.1f} s")
        env = {**os.environ, "BENCH_PHOENIX_KEY": server.api_key}
        times = run_rounds(
            "phoenix",
            rounds,
            lambda raw: [
                sys.executable,
                "-c",
                CEILING_PHOENIX,
                server.url,
                "bench",
                str(raw),
                server.api_key,
            ],
            lambda suite: [
                EVALKIT,
                "import",
                "phoenix",
                "--url",
                server.url,
                "--dataset",
                "bench",
                "--api-key-env",
                "BENCH_PHOENIX_KEY",
                "--into",
                str(suite),
            ],
            env,
            examples,
        )
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(f"real Phoenix (sqlite), {examples:,} examples, 3 splits", times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default="langfuse,phoenix")
    args = parser.parse_args()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    peers = args.peers.split(",")
    if "langfuse" in peers:
        bench_langfuse(args.examples, args.rounds)
    if "phoenix" in peers:
        bench_phoenix(args.examples, args.rounds)
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
