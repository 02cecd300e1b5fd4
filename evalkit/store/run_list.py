"""Paged reads of experiments and runs (the web UI's lists, charts and case comparison):
each statement does work bounded by a page, or one aggregate pass over an experiment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.model import run_list as wire

MEASURE_BINS = 20


@dataclass(frozen=True)
class ExperimentFilter:
    experiment_id: int | None = None
    workspace_id: int | None = None
    dataset_id: int | None = None
    agent_id: int | None = None
    status: str | None = None


@dataclass(frozen=True)
class RunFilter:
    state: str | None = None
    case_id: str | None = None
    tag: str | None = None
    score: str | None = None
    below: float | None = None


# --------------------------------------------------------------------------- experiments


async def experiment_page(
    conn: Conn, where: ExperimentFilter, offset: int, limit: int, *, with_scores: bool = True
) -> wire.ExperimentPage:
    params = dict(
        experiment_id=where.experiment_id,
        workspace_id=where.workspace_id,
        dataset_id=where.dataset_id,
        agent_id=where.agent_id,
        status=where.status,
    )
    rows = await conn.all("experiment_brief_page", **params, offset=offset, limit=limit)
    total = await conn.one("experiment_brief_count", **params)
    briefs = await _with_means(conn, rows, with_scores)
    return wire.ExperimentPage(
        total=total["n"] if total else 0, offset=offset, limit=limit, experiments=briefs
    )


async def experiment_brief(
    conn: Conn, experiment_id: int, *, with_scores: bool = True
) -> wire.ExperimentBrief:
    """One experiment; ``with_scores`` False leaves its means out (they read every score
    of its current round, the one costly part)."""
    rows = await conn.all(
        "experiment_brief_page",
        experiment_id=experiment_id,
        workspace_id=None,
        dataset_id=None,
        agent_id=None,
        status=None,
        offset=0,
        limit=1,
    )
    if not rows:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    [brief] = await _with_means(conn, rows, with_scores)
    return brief


async def _with_means(
    conn: Conn, rows: list[dict[str, Any]], with_scores: bool = True
) -> list[wire.ExperimentBrief]:
    if not rows:
        return []
    means = []
    if with_scores:
        means = await conn.all(
            "score_means_for_experiments",
            experiment_ids=[r["id"] for r in rows],
            rounds=[r["scoring_round"] for r in rows],
        )
    by_experiment: dict[int, list[wire.ScoreMean]] = {}
    for m in means:
        gauge = bool(m["gauge"])
        by_experiment.setdefault(m["experiment_id"], []).append(
            wire.ScoreMean(
                name=m["name"],
                kind="gauge" if gauge else "evaluator",
                readings=m["readings"],
                mean=None if gauge else m["mean"],
                raw_mean=m["raw_mean"] if gauge else None,
            )
        )
    return [
        wire.ExperimentBrief(
            id=r["id"],
            workspace=r["workspace"],
            dataset=f"{r['dataset']}@{r['dataset_workspace']}",
            agent=f"{r['agent']}@{r['agent_workspace']}",
            driver=r["driver"],
            status=r["status"],
            repetitions=r["repetitions"],
            model=r["model"],
            split=r["split"],
            created_at=r["created_at"],
            created_by=r["created_by"],
            finished_at=r["finished_at"],
            scoring_round=r["scoring_round"],
            runs=sum(r["by_state"].values()),
            by_state=r["by_state"],
            scores=by_experiment.get(r["id"], []),
        )
        for r in rows
    ]


async def score_version(conn: Conn, experiment: wire.ExperimentBrief) -> str:
    """``round:count:newest id`` of the current round's scores (they are insert-only)."""
    round_ = experiment.scoring_round
    row = await conn.one("score_version_get", experiment_id=experiment.id, round=round_)
    return f"{round_}:{row['n']}:{row['last_id']}" if row else f"{round_}:0:0"


# --------------------------------------------------------------------------- runs


async def run_page(
    conn: Conn,
    experiment: wire.ExperimentBrief,
    where: RunFilter,
    offset: int,
    limit: int,
) -> wire.RunPage:
    params = dict(
        experiment_id=experiment.id,
        round=experiment.scoring_round,
        state=where.state,
        case_id=where.case_id,
        tag=where.tag,
        score=where.score,
        below=where.below,
    )
    total = await conn.one("run_list_count", **params)
    rows = await conn.all("run_list_page", **params, offset=offset, limit=limit)
    scores: dict[int, list[wire.RunScore]] = {}
    if rows:
        found = await conn.all(
            "run_list_scores", run_ids=[r["id"] for r in rows], round=experiment.scoring_round
        )
        for s in found:
            scores.setdefault(s["run_id"], []).append(
                wire.RunScore(
                    name=s["name"],
                    kind=s["kind"],
                    value=s["value"],
                    raw=s["raw"],
                    skipped=s["skipped"],
                    error=s["error"],
                )
            )
    tags = [
        row["tag"] for row in await conn.all("experiment_case_tags", experiment_id=experiment.id)
    ]
    return wire.RunPage(
        experiment=experiment,
        total=total["n"] if total else 0,
        offset=offset,
        limit=limit,
        runs=[_run_item(r, scores.get(r["id"], [])) for r in rows],
        tags=tags,
        score_version=await score_version(conn, experiment),
    )


def _run_item(r: dict[str, Any], scores: list[wire.RunScore]) -> wire.RunListItem:
    tags = r["tags"]
    return wire.RunListItem(
        id=r["id"],
        case_id=r["case_id"],
        repetition=r["repetition"],
        state=r["state"],
        harness_status=r["harness_status"],
        error=r["error"],
        timed_out=r["timed_out"],
        attempts=r["attempts"],
        tags=[str(t) for t in tags] if isinstance(tags, list) else [],
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        seconds=r["seconds"],
        cost_usd=r["cost_usd"],
        trajectory_valid=r["trajectory_valid"],
        trajectory_partial=r["trajectory_partial"],
        scores=scores,
    )


# --------------------------------------------------------------------------- charts


async def charts(conn: Conn, experiment: wire.ExperimentBrief) -> wire.ExperimentCharts:
    where = {"experiment_id": experiment.id, "round": experiment.scoring_round}
    bins = await conn.all("score_histograms", **where)
    counts: dict[str, list[int]] = {}
    for row in bins:
        counts.setdefault(row["name"], [0] * 10)[row["bin"] - 1] = row["n"]
    measures = await conn.all("run_measure_histograms", **where, bins=MEASURE_BINS)
    return wire.ExperimentCharts(
        experiment_id=experiment.id,
        round=experiment.scoring_round,
        scores=[
            wire.ScoreDistribution(
                name=name, histogram=wire.Histogram(low=0.0, high=1.0, counts=values)
            )
            for name, values in counts.items()
        ],
        latency=_measure(measures, "latency", "s"),
        cost=_measure(measures, "cost", "USD"),
    )


def _measure(rows: list[dict[str, Any]], measure: str, unit: str) -> wire.Measure:
    mine = [r for r in rows if r["measure"] == measure]
    if not mine:
        return wire.Measure(unit=unit, runs=0, p50=None, p95=None, max=None, histogram=None)
    first = mine[0]
    counts = [0] * MEASURE_BINS
    for r in mine:
        counts[r["bin"] - 1] = r["n"]
    return wire.Measure(
        unit=unit,
        runs=first["runs"],
        p50=first["p50"],
        p95=first["p95"],
        max=first["high"],
        histogram=wire.Histogram(low=first["low"], high=first["high"], counts=counts),
    )


# --------------------------------------------------------------------------- compare


async def case_comparison(
    conn: Conn,
    a: wire.ExperimentBrief,
    b: wire.ExperimentBrief,
    *,
    score: str | None,
    changed: bool,
    offset: int,
    limit: int,
) -> wire.CaseComparison:
    params = dict(
        a=a.id,
        b=b.id,
        round_a=a.scoring_round,
        round_b=b.scoring_round,
        score=score,
        changed=changed,
    )
    rows = await conn.all("case_compare_page", **params, offset=offset, limit=limit)
    first = rows
    if not rows and offset:
        first = await conn.all("case_compare_page", **params, offset=0, limit=1)
    total = first[0]["total"] if first else 0
    names = first[0]["names"] if first else []
    if first:  # the statement counted both rounds' scores as it read them
        version = f"{first[0]['version_a']}/{first[0]['version_b']}"
    else:
        version = f"{await score_version(conn, a)}/{await score_version(conn, b)}"
    return wire.CaseComparison(
        a=a,
        b=b,
        total=total,
        offset=offset,
        limit=limit,
        names=list(names or []),
        cases=[
            wire.CaseRow(
                case_id=r["case_id"],
                runs_a=r["runs_a"],
                runs_b=r["runs_b"],
                regressions=r["regressions"],
                improvements=r["improvements"],
                scores=msgspec.convert(r["scores"], list[wire.CaseScores]),
            )
            for r in rows
        ],
        score_version=version,
    )
