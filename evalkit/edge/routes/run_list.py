"""Paged reads for lists and charts (any logged-in user): experiments with their score
means, one page of an experiment's runs, the distributions of its scores, latency and cost,
and two experiments case by case. Each one's work is bounded by its page, not by how many
runs an experiment has."""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import get_args

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.kept import KeptAnswers
from evalkit.errors import BadRequest
from evalkit.model import run_list as wire
from evalkit.model.names import parse_ref, whole_number
from evalkit.model.runs import RunState
from evalkit.store import agents, datasets
from evalkit.store import run_list as store
from evalkit.store.workspaces import get_workspace

RUN_STATES = get_args(RunState)
MAX_LIMIT = 200
CASE_TABLES_KEPT = 16


def _id(call: Call, what: str) -> int:
    text = call.param(what)
    number = whole_number(text)
    if number is None:
        raise BadRequest(
            f"experiment ids are whole numbers, got {text!r}; see `evalkit experiments list`"
        )
    return number


def _whole(call: Call, name: str, default: int, low: int, high: int) -> int:
    text = call.request.query_params.get(name)
    if text is None or text == "":
        return default
    number = whole_number(text)
    if number is None or not low <= number <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return number


def _text(call: Call, name: str) -> str | None:
    text = call.request.query_params.get(name)
    return text if text else None


def _paging(call: Call, default_limit: int) -> tuple[int, int]:
    offset = _whole(call, "offset", 0, 0, 10**9)
    return offset, _whole(call, "limit", default_limit, 1, MAX_LIMIT)


# --------------------------------------------------------------------------- experiments


async def experiments_page(call: Call) -> wire.ExperimentPage:
    access.require_read(call.actor)
    status = _text(call, "status")
    if status not in (None, "running", "finished"):
        raise BadRequest(f"status is running or finished, got {status!r}")
    offset, limit = _paging(call, 50)
    me = call.actor.username or ""
    async with call.db.connection() as conn:
        workspace_id = dataset_id = agent_id = None
        if workspace := _text(call, "workspace"):
            workspace_id = (await get_workspace(conn, call.actor, workspace)).id
        if text := _text(call, "dataset"):
            ref = parse_ref(text, "dataset").resolve(me)
            ws = await get_workspace(conn, call.actor, ref.workspace or "")
            dataset_id = await datasets.dataset_id(conn, ws, ref.name)
        if text := _text(call, "agent"):
            ref = parse_ref(text, "agent").resolve(me)
            ws = await get_workspace(conn, call.actor, ref.workspace or "")
            agent_id = (await agents.get_agent(conn, ws.id, ref.name)).id
        where = store.ExperimentFilter(
            workspace_id=workspace_id, dataset_id=dataset_id, agent_id=agent_id, status=status
        )
        return await store.experiment_page(
            conn, where, offset, limit, with_scores=_scores(call), kept=_kept(call).means
        )


async def experiment_brief(call: Call) -> wire.ExperimentBrief:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        return await store.experiment_brief(
            conn, experiment_id, with_scores=_scores(call), kept=_kept(call).means
        )


def _scores(call: Call) -> bool:
    """``?scores=0``: leave each score's mean out (it reads every score of the round)."""
    return call.request.query_params.get("scores", "1").lower() not in ("0", "false", "no")


# --------------------------------------------------------------------------- runs


async def experiment_runs(call: Call) -> wire.RunPage:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    state = _text(call, "state")
    if state is not None and state not in RUN_STATES:
        raise BadRequest(f"state is one of {', '.join(RUN_STATES)}; got {state!r}")
    score, below = _text(call, "score"), _below(call)
    if below is not None and score is None:
        raise BadRequest("below needs score: the name of the score to compare with it")
    offset, limit = _paging(call, 50)
    where = store.RunFilter(
        state=state, case_id=_text(call, "case"), tag=_text(call, "tag"), score=score, below=below
    )
    async with call.db.connection() as conn:
        experiment = await store.experiment_brief(conn, experiment_id, with_scores=False)
        return await store.run_page(conn, experiment, where, offset, limit)


def _below(call: Call) -> float | None:
    text = _text(call, "below")
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRequest(f"below must be a number such as 0.5, got {text!r}")
    return value


async def experiment_charts(call: Call) -> wire.ExperimentCharts:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        experiment = await store.experiment_brief(conn, experiment_id, with_scores=False)
        return await store.charts(conn, experiment)


# --------------------------------------------------------------------------- compare


async def experiments_compare_cases(call: Call) -> wire.CaseComparison:
    access.require_read(call.actor)
    a_id, b_id = _id(call, "experiment"), _id(call, "other")
    changed = call.request.query_params.get("changed", "0").lower() in ("1", "true", "yes")
    offset, limit = _paging(call, 50)
    async with call.db.connection() as conn:
        a = await store.experiment_brief(conn, a_id, with_scores=False)
        b = await store.experiment_brief(conn, b_id, with_scores=False)
        version = f"{await store.score_version(conn, a)}/{await store.score_version(conn, b)}"

    async def make() -> store.CaseTable:
        async with call.db.connection() as conn:
            return await store.case_table(conn, a, b)

    table = await _kept(call).case_tables.get((a.id, b.id, version), make)
    total, cases = store.case_page(
        table, score=_text(call, "score"), changed=changed, offset=offset, limit=limit
    )
    return wire.CaseComparison(
        a=a,
        b=b,
        total=total,
        offset=offset,
        limit=limit,
        names=table.names,
        cases=cases,
        score_version=version,
    )


class Kept:
    """What these reads keep in the server's memory, under keys that change with any new
    score (scores are only ever inserted): score means, and whole case tables of recent
    comparisons, whose pages are then cut without reading the scores again."""

    def __init__(self) -> None:
        self.means: store.MeansKept = OrderedDict()
        self.case_tables = KeptAnswers(CASE_TABLES_KEPT)


def _kept(call: Call) -> Kept:
    """The app's Kept (one per server: ids mean nothing across databases)."""
    state = call.request.app.state
    if getattr(state, "run_list_kept", None) is None:
        state.run_list_kept = Kept()
    return state.run_list_kept  # type: ignore[no-any-return]


_EXP = "/api/experiments/{experiment}"

ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/experiment-list",
        experiments_page,
        "A page of experiments, newest first, with each score's mean in the current round "
        "(?workspace=, ?dataset=NAME@WS, ?agent=NAME@WS, ?status=, ?offset=, ?limit= up to 200; "
        "?scores=0 leaves the means out)",
        returns=wire.ExperimentPage,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP + "/brief",
        experiment_brief,
        "One experiment without its runs: runs by state and each score's mean (?scores=0 "
        "leaves the means out)",
        returns=wire.ExperimentBrief,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP + "/runs",
        experiment_runs,
        "A page of an experiment's runs with their scores, latency and cost (?state=, "
        "?case=, ?tag=, ?score=NAME with ?below=X, ?offset=, ?limit= up to 200)",
        returns=wire.RunPage,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP + "/charts",
        experiment_charts,
        "Distributions of an experiment's scores (ten bins of [0, 1]), run latency and cost",
        returns=wire.ExperimentCharts,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP + "/compare/{other}/cases",
        experiments_compare_cases,
        "Experiment {other} (new) against {experiment} (baseline) case by case, regressions "
        "first (?score=NAME, ?changed=1: only cases that changed, ?offset=, ?limit=)",
        returns=wire.CaseComparison,
        tags=["scores"],
    ),
]
