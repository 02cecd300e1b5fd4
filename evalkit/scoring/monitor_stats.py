"""A monitor's scores over a window: per score and per day, and the gates on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalkit.model import monitors as wire
from evalkit.model.stats import GateResult
from evalkit.scoring.stats import check_monitor_gate, parse_gate, wilson_interval


def summarize(rows: Sequence[dict[str, Any]]) -> list[wire.MonitorScore]:
    """``rows``: the ``monitor_score_days`` rows (one per score and day)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["score_name"], []).append(row)
    return [_score(name, days) for name, days in sorted(by_name.items())]


def _score(name: str, days: list[dict[str, Any]]) -> wire.MonitorScore:
    n = sum(d["n"] for d in days)
    raw_n = sum(d["raw_n"] for d in days)
    passed = sum(d["passed"] for d in days)
    mean = _weighted(days, "mean", "n")
    interval = wilson_interval(passed, n)
    return wire.MonitorScore(
        name=name,
        kind=days[0]["kind"],
        n=n or raw_n,
        mean=mean,
        pass_rate=passed / n if n else None,
        pass_interval=list(interval) if interval else None,
        raw_mean=_weighted(days, "raw_mean", "raw_n"),
        errors=sum(d["errors"] for d in days),
        skipped=sum(d["skipped"] for d in days),
        days=[
            wire.MonitorDay(
                day=d["day"],
                n=d["n"] or d["raw_n"],
                mean=_float(d["mean"]),
                pass_rate=d["passed"] / d["n"] if d["n"] else None,
                raw_mean=_float(d["raw_mean"]),
            )
            for d in days
        ],
    )


def _weighted(days: list[dict[str, Any]], value: str, count: str) -> float | None:
    total = sum(d[count] for d in days if d[value] is not None)
    if not total:
        return None
    return sum(float(d[value]) * d[count] for d in days if d[value] is not None) / total


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def check(
    scores: Sequence[wire.MonitorScore], gates: Sequence[str], window: str
) -> list[GateResult]:
    """Each gate (``judge>=0.8``, ``judge.pass_rate>=0.9``, ``latency.raw_mean<=20``)
    checked on the window's scores; a gate that does not parse raises StatsError."""
    parsed = [parse_gate(text) for text in gates]
    by_name = {s.name: s for s in scores}
    results = []
    for gate in parsed:
        found = by_name.get(gate.name)
        reading = None if found is None else (found.n, found.mean, found.pass_rate, found.raw_mean)
        results.append(check_monitor_gate(gate, reading, window))
    return results
