"""Score summaries and comparisons of experiments (reads: any logged-in user).

Both read every score of the round, and a comparison resamples each score name's paired
differences (for two experiments of 10,000 runs, a few hundred milliseconds, most of it
the bootstrap's draws), so answers are kept in the server's memory under the
experiments' score versions and their query: asked again with no new score, an answer is
served from memory, and many callers asking at once share one computation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import msgspec

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.kept import KeptAnswers
from evalkit.errors import BadRequest
from evalkit.model import stats as wire
from evalkit.model.names import whole_number
from evalkit.scoring import stats
from evalkit.scoring.agreement import agreements
from evalkit.store import labels as labels_store
from evalkit.store.stats import experiment_readings, readings_version

KEPT = 32
"""Answers kept per server (the newest asked)."""

T = TypeVar("T")


async def kept(state: Any, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
    """The answer for ``key`` from the app's kept answers (``state``: ids mean nothing
    across databases)."""
    answers: KeptAnswers | None = getattr(state, "stats_kept", None)
    if answers is None:
        answers = state.stats_kept = KeptAnswers(KEPT)
    return await answers.get(key, make)


def _id(call: Call, param: str) -> int:
    text = call.param(param)
    number = whole_number(text)
    if number is None:
        raise BadRequest(f"experiment ids are whole numbers, got {text!r}")
    return number


def _int_param(call: Call, name: str, default: int) -> int:
    text = call.request.query_params.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {text!r}") from None


async def experiment_scores(call: Call) -> wire.ExperimentScores:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    ks = [_k(text) for text in call.request.query_params.getlist("k")]
    async with call.db.connection() as conn:
        version = await readings_version(conn, experiment_id)

    async def make() -> wire.ExperimentScores:
        async with call.db.connection() as conn:
            data = await experiment_readings(conn, experiment_id)
        return await asyncio.to_thread(stats.summarize, data, ks=ks or None)

    key = ("scores", experiment_id, version, tuple(ks))
    try:
        return await kept(call.request.app.state, key, make)
    except stats.StatsError as exc:
        raise BadRequest(f"experiment {experiment_id}: {exc}", code="bad-k") from None


def _k(text: str) -> int:
    number = whole_number(text)
    if number is None:
        raise BadRequest(f"k must be a whole number, got {text!r}", code="bad-k")
    return number


async def experiments_compare(call: Call) -> wire.Comparison:
    access.require_read(call.actor)
    a_id, b_id = _id(call, "experiment"), _id(call, "other")
    query = call.request.query_params
    try:
        gates = [stats.parse_gate(text) for text in query.getlist("gate")]
    except stats.StatsError as exc:
        raise BadRequest(str(exc), code="bad-gate") from None
    # Agreement gates read the human labels, which the compare cache does not key on: they
    # are checked after it, fresh each time.
    on_labels = [gate for gate in gates if gate.stat == "agreement"]
    gates = [gate for gate in gates if gate.stat != "agreement"]
    no_regressions = query.get("no_regressions", "0").lower() in ("1", "true", "yes")
    seed = _int_param(call, "seed", stats.BOOTSTRAP_SEED)
    resamples = _int_param(call, "resamples", stats.BOOTSTRAP_RESAMPLES)
    versions = await asyncio.gather(_version(call, a_id), _version(call, b_id))

    async def make() -> wire.Comparison:
        # The two reads on two connections at once: the database's share of each (the
        # scores of 10,000 runs as arrays: about 100 ms) runs beside the other's.
        a, b = await asyncio.gather(_readings(call, a_id), _readings(call, b_id))
        return await asyncio.to_thread(
            stats.compare,
            a,
            b,
            gates=gates,
            no_regressions=no_regressions,
            seed=seed,
            resamples=resamples,
        )

    key = ("compare", a_id, b_id, tuple(versions), tuple(gates), no_regressions, seed, resamples)
    try:
        comparison = await kept(call.request.app.state, key, make)
    except stats.StatsError as exc:
        raise BadRequest(str(exc)) from None
    if not on_labels:
        return comparison
    return await _with_agreement_gates(call, comparison, on_labels, b_id)


async def _with_agreement_gates(
    call: Call, comparison: wire.Comparison, gates: list[stats.Gate], b_id: int
) -> wire.Comparison:
    async with call.db.connection() as conn:
        readings = await labels_store.agreement_readings(conn, b_id)
    by_name = {a.name: a for a in agreements(readings)}
    results = [stats.check_agreement_gate(g, by_name.get(g.name), b_id) for g in gates]
    return msgspec.structs.replace(
        comparison,
        gates=[*comparison.gates, *results],
        passed=comparison.passed and all(r.passed for r in results),
    )


async def _version(call: Call, experiment_id: int) -> tuple[int, int, int, int]:
    async with call.db.connection() as conn:
        return await readings_version(conn, experiment_id)


async def _readings(call: Call, experiment_id: int) -> stats.ExperimentReadings:
    async with call.db.connection() as conn:
        return await experiment_readings(conn, experiment_id)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/experiments/{experiment}/scores",
        experiment_scores,
        "Per score name: mean and pass rate with 95% intervals, null counts; with "
        "repetitions, pass@k and pass^k per case (?k=N, repeatable)",
        returns=wire.ExperimentScores,
        tags=["scores"],
    ),
    Endpoint(
        "GET",
        "/api/experiments/{experiment}/compare/{other}",
        experiments_compare,
        "Compare experiment {other} (new) with {experiment} (baseline), paired by case: "
        "regressions, mean differences, McNemar; gates with ?gate=EXPR and "
        "?no_regressions=1 (?seed=, ?resamples= for the bootstrap)",
        returns=wire.Comparison,
        tags=["scores"],
    ),
]
