"""Paged reads of experiments and runs (the web UI's lists, charts and case comparison):
each statement does work bounded by a page, or one aggregate pass over an experiment."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.model import run_list as wire
from evalkit.store.runs import experiment_fields

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


MeansKept = OrderedDict[tuple[int, int, int, int], list[wire.ScoreMean]]
"""Score means by (experiment, round, the newest score id anywhere), newest last."""
MEANS_KEPT = 1000


async def experiment_page(
    conn: Conn,
    where: ExperimentFilter,
    offset: int,
    limit: int,
    *,
    with_scores: bool = True,
    kept: MeansKept | None = None,
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
    briefs = await _with_means(conn, rows, with_scores, kept)
    return wire.ExperimentPage(
        total=total["n"] if total else 0, offset=offset, limit=limit, experiments=briefs
    )


async def experiment_brief(
    conn: Conn, experiment_id: int, *, with_scores: bool = True, kept: MeansKept | None = None
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
    [brief] = await _with_means(conn, rows, with_scores, kept)
    return brief


async def _with_means(
    conn: Conn,
    rows: list[dict[str, Any]],
    with_scores: bool = True,
    kept: MeansKept | None = None,
) -> list[wire.ExperimentBrief]:
    by_experiment: dict[int, list[wire.ScoreMean]] = {}
    if rows and with_scores:
        by_experiment = await _means(conn, rows, kept)
    return [
        wire.ExperimentBrief(
            **experiment_fields(r, r["by_state"], created_by=r["created_by"]),
            scoring_round=r["scoring_round"],
            scores=by_experiment.get(r["id"], []),
        )
        for r in rows
    ]


async def _means(
    conn: Conn, rows: list[dict[str, Any]], kept: MeansKept | None
) -> dict[int, list[wire.ScoreMean]]:
    """Each experiment's means of its current round; those in ``kept`` under the same
    newest score id are not read again (no score was added anywhere since)."""
    found: dict[int, list[wire.ScoreMean]] = {}
    keys: dict[int, tuple[int, int, int, int]] = {}
    wanted = rows
    if kept is not None:
        newest = await conn.one("score_newest_id")
        for r in rows:
            failed = (r["by_state"] or {}).get("failed", 0)
            keys[r["id"]] = (r["id"], r["scoring_round"], newest["id"] if newest else 0, failed)
        found = {r["id"]: kept[keys[r["id"]]] for r in rows if keys[r["id"]] in kept}
        wanted = [r for r in rows if r["id"] not in found]
    if wanted:
        means = await conn.all(
            "score_means_for_experiments",
            experiment_ids=[r["id"] for r in wanted],
            rounds=[r["scoring_round"] for r in wanted],
        )
        read: dict[int, list[wire.ScoreMean]] = {r["id"]: [] for r in wanted}
        for m in means:
            gauge = bool(m["gauge"])
            read[m["experiment_id"]].append(
                wire.ScoreMean(
                    name=m["name"],
                    kind="gauge" if gauge else "evaluator",
                    readings=m["readings"],
                    mean=None if gauge else m["mean"],
                    raw_mean=m["raw_mean"] if gauge else None,
                )
            )
        found.update(read)
        if kept is not None:
            kept.update((keys[i], scores) for i, scores in read.items())
    if kept is not None:
        for key in (keys[r["id"]] for r in rows):
            kept.move_to_end(key)
        while len(kept) > MEANS_KEPT:
            kept.popitem(last=False)
    return found


async def score_version(conn: Conn, experiment: wire.ExperimentBrief) -> str:
    """``round:count:newest id:unanswered`` of the current round's scores (they are
    insert-only) and the runs that ended failed or errored."""
    round_ = experiment.scoring_round
    row = await conn.one("score_version_get", experiment_id=experiment.id, round=round_)
    if row is None:
        return f"{round_}:0:0:0"
    return f"{round_}:{row['n']}:{row['last_id']}:{row['unanswered']}"


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


class CaseTable(msgspec.Struct, frozen=True):
    """Every case of two experiments with both sides' means per score name: what a page
    of the case comparison is cut from (filtered, ordered and paged in Python)."""

    names: list[str]
    cases: list[wire.CaseRow]


async def case_table(conn: Conn, a: wire.ExperimentBrief, b: wire.ExperimentBrief) -> CaseTable:
    rows = await conn.all(
        "case_compare_table",
        a=a.id,
        b=b.id,
        round_a=a.scoring_round,
        round_b=b.scoring_round,
    )
    names: set[str] = set()
    cases = []
    for r in rows:
        scores = []
        for pair in r["scores"]:
            names.add(pair["name"])
            scores.append(
                wire.CaseScores(
                    name=pair["name"],
                    a=pair["a"],
                    b=pair["b"],
                    change=_change(pair["a"], pair["b"]),
                )
            )
        cases.append(
            wire.CaseRow(
                case_id=r["case_id"],
                runs_a=r["runs_a"],
                runs_b=r["runs_b"],
                failed_a=r["failed_a"],
                failed_b=r["failed_b"],
                regressions=sum(s.change == "regression" for s in scores),
                improvements=sum(s.change == "improvement" for s in scores),
                scores=scores,
            )
        )
    return CaseTable(names=sorted(names), cases=cases)


def _change(a: float | None, b: float | None) -> Any:
    """Pass is at least 0.5: passing in A and failing in B is a regression."""
    if a is None:
        return "only_b"
    if b is None:
        return "only_a"
    if a >= 0.5 > b:
        return "regression"
    if b >= 0.5 > a:
        return "improvement"
    return "same"


def case_page(
    table: CaseTable, *, score: str | None, changed: bool, offset: int, limit: int
) -> tuple[int, list[wire.CaseRow]]:
    """The cases matching the filters, regressions first, then improvements, then the
    largest drop; a score filter keeps that score alone in each row."""
    rows = table.cases
    if score is not None:
        rows = [_only(row, score) for row in rows]
    if changed:
        rows = [row for row in rows if row.regressions or row.improvements]
    rows = sorted(rows, key=_order)
    return len(rows), rows[offset : offset + limit]


def _only(row: wire.CaseRow, score: str) -> wire.CaseRow:
    kept = [s for s in row.scores if s.name == score]
    return msgspec.structs.replace(
        row,
        scores=kept,
        regressions=sum(s.change == "regression" for s in kept),
        improvements=sum(s.change == "improvement" for s in kept),
    )


def _order(row: wire.CaseRow) -> tuple[int, int, float, str]:
    drops = [s.b - s.a for s in row.scores if s.a is not None and s.b is not None]
    return (-row.regressions, -row.improvements, min(drops) if drops else math.inf, row.case_id)
