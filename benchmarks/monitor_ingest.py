"""Monitor on and off: OTLP ingest held at 20,000 spans/s while a monitor scores the same
agent's sessions, against the same ingest with no monitor, alternating in one run.

One embedded PostgreSQL, the edge (`evalkit server --no-worker`) and one worker
(`evalkit worker`), each its own process, as a deployment that scores traffic runs them.
Rounds alternate: "off" posts to agent `quiet`, which no monitor watches; "on" posts to
agent `watched`, whose monitor samples `--sample` of the settled sessions and scores each
with the gauges steps, latency and tool_call_count (each session's trajectory is built from
its spans by the mapping, as for a judge). The worker is the same process in both; before
an "off" round the script waits until the monitor has scored what the last "on" round gave
it. Per round: spans acked per second (an ack comes after COMMIT), p50 and p99 ack
latency, errors; then the medians of each mode and
their ratio, and how many sessions the monitor scored (so the "on" rounds did have it
working), with the load average before and after.

    uv run python benchmarks/monitor_ingest.py [--rounds 4] [--seconds 20] [--rate 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _load import load_stack, machine, percentile
from load_otlp import drive, template
from otlp_ingest import BATCH

from evalkit.otel.mapping import load_starter

GAUGES = ["steps", "latency", "tool_call_count"]


def drain(stack, timeout: float = 120) -> float:
    """Seconds until the monitor has scored every session it took, so that an "off" round
    has no scoring left over from the "on" round before it."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        left = stack.query("SELECT count(*) FROM monitor_sessions WHERE scored_at IS NULL")[0][0]
        if left == 0:
            break
        time.sleep(0.5)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each mode")
    parser.add_argument("--seconds", type=float, default=20, help="seconds a round")
    parser.add_argument("--rate", type=float, default=20_000, help="spans/s offered")
    parser.add_argument(
        "--sample", type=float, default=0.01, help="the monitor's sample rate (default 0.01)"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="most batches in flight")
    args = parser.parse_args()

    with load_stack(EVALKIT_OTEL_SETTLE_SECONDS="1") as stack:
        stack.start_edge()
        stack.spawn("worker", ["worker"])
        auth = {"Authorization": f"Bearer {stack.admin_token()}"}
        tokens: dict[str, str] = {}
        with httpx.Client(base_url=stack.url, headers=auth, timeout=60) as api:
            for agent in ("quiet", "watched"):
                api.post(
                    "/api/workspaces/admin/agents",
                    json={"name": agent, "mapping": load_starter("openinference")},
                ).raise_for_status()
                tokens[agent] = api.post(
                    f"/api/workspaces/admin/agents/{agent}/tokens", json={}
                ).json()["token"]
            api.post(
                "/api/monitors",
                json={
                    "name": "bench",
                    "agent": "watched@admin",
                    "sample_rate": args.sample,
                    "evaluators": GAUGES,
                },
            ).raise_for_status()
        body = template()
        traces = f"{stack.url}/api/otel/v1/traces"
        print(
            f"OTLP ingest at {args.rate:,.0f} spans/s ({BATCH}-span batches, at most "
            f"{args.concurrency} in flight), {args.rounds} rounds of {args.seconds:g} s per "
            f"mode, alternating; the monitor samples {args.sample:g} of the settled sessions "
            f"and scores them with {', '.join(GAUGES)}; {machine()} before the run",
            flush=True,
        )
        print(f"\n{'round':<8}{'mode':<6}{'acked spans/s':>14}{'p50 ms':>8}{'p99 ms':>8}"
              f"{'errors':>8}{'scored':>9}{'drain s':>9}")  # fmt: skip
        results: dict[str, list[dict]] = {"off": [], "on": []}
        first = 0
        for n in range(args.rounds * 2):
            mode = "off" if n % 2 == 0 else "on"
            agent = "quiet" if mode == "off" else "watched"
            drained = drain(stack) if mode == "off" else 0.0
            result = asyncio.run(
                drive(
                    traces,
                    tokens[agent],
                    body,
                    seconds=args.seconds,
                    rate=args.rate,
                    concurrency=args.concurrency,
                    window=1e9,
                    first=first,
                    on_window=lambda *_: None,
                )
            )
            first += result["sent"]
            scored = stack.query(
                "SELECT count(*) FROM monitor_sessions WHERE scored_at IS NOT NULL"
            )
            result["scored"] = scored[0][0]
            result["drained"] = drained
            results[mode].append(result)
            lat = result["latencies"]
            print(
                f"{n + 1:<8}{mode:<6}{result['acked'] / result['elapsed']:>14,.0f}"
                f"{statistics.median(lat) * 1000:>8.0f}{percentile(lat, 0.99) * 1000:>8.0f}"
                f"{sum(result['errors'].values()):>8}{result['scored']:>9,}{drained:>9.1f}",
                flush=True,
            )
        time.sleep(2)
        taken, done = stack.query("SELECT count(*), count(scored_at) FROM monitor_sessions")[0]
        settled = stack.query(
            "SELECT count(*) FROM sessions s JOIN agents a ON a.id = s.agent_id "
            "WHERE a.name = 'watched'"
        )[0][0]

    def median(mode: str, key) -> float:
        return statistics.median(key(r) for r in results[mode])

    def rate(r: dict) -> float:
        return r["acked"] / r["elapsed"]

    def p50(r: dict) -> float:
        return statistics.median(r["latencies"]) * 1000

    def p99(r: dict) -> float:
        return percentile(r["latencies"], 0.99) * 1000

    print(f"\n{'median of the rounds':<34}{'off':>10}{'on':>10}{'on/off':>8}")
    for label, key in (("acked spans/s", rate), ("ack p50, ms", p50), ("ack p99, ms", p99)):
        off, on = median("off", key), median("on", key)
        print(f"{label:<34}{off:>10,.0f}{on:>10,.0f}{on / off:>8.2f}")
    errors = sum(sum(r["errors"].values()) for rs in results.values() for r in rs)
    print(f"{'batches not acked (all rounds)':<34}{errors:>10}")
    print(
        f"monitor: {settled:,} sessions of the watched agent stored, {taken:,} taken "
        f"(sample {args.sample:g}), {done:,} scored by the end"
    )
    print(f"({machine()} at the end)")


if __name__ == "__main__":
    main()
