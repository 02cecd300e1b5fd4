"""Scores: a run's scores (every round), an experiment's scoring rounds, and re-scoring an
experiment's stored runs in a new round (``evalkit evaluate``)."""

from __future__ import annotations

from typing import Any

from evalkit.auth import access
from evalkit.cases.model import CUSTOM_NAME_RE, LIBRARY_JUDGES
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest, Conflict
from evalkit.jobs import procrastinate_adapter, queue
from evalkit.model import scores as wire
from evalkit.model.names import whole_number
from evalkit.scoring.run import identities, selector_names
from evalkit.store import runs as runs_store
from evalkit.store import scores as store
from evalkit.store.workspaces import get_workspace


def _id(call: Call, what: str) -> int:
    text = call.param(what)
    number = whole_number(text)
    if number is None:
        raise BadRequest(f"{what} ids are whole numbers, got {text!r}")
    return number


async def run_scores(call: Call) -> list[wire.Score]:
    access.require_read(call.actor)
    run_id = _id(call, "run")
    text = call.request.query_params.get("round")
    number = whole_number(text)
    if text is not None and not (number is not None and number >= 1):
        raise BadRequest(f"round must be a whole number of at least 1, got {text!r}")
    async with call.db.connection() as conn:
        await store.run_round(conn, run_id)  # 404 for no such run
        return await store.run_scores(conn, run_id, number)


async def experiment_rounds(call: Call) -> list[wire.ScoringRound]:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        await runs_store.experiment_row(conn, experiment_id)  # 404 for no such experiment
        return await _rounds(conn, experiment_id)


async def experiment_evaluate(call: Call) -> wire.ScoringRound:
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        row = await runs_store.experiment_row(conn, experiment_id)
        ws = await get_workspace(conn, call.actor, row.workspace)
    access.require_write(call.actor, ws.facts, "re-score its experiments")
    body: wire.EvaluateRequest = await call.payload()
    only = _evaluator_names(body.evaluators)
    if row.driver == "sdk":
        await _refuse_what_lives_in_the_script(call, experiment_id)
    if row.status != "finished":
        raise Conflict(
            f"experiment {experiment_id} is still running; re-score it once every run has "
            f"ended (`evalkit experiments show {experiment_id}`)",
            code="experiment-running",
        )
    async with call.db.transaction() as conn:
        run_ids = await store.scorable_runs(conn, experiment_id)
        if not run_ids:
            raise BadRequest(
                f"experiment {experiment_id} has no run that reached scoring (every run "
                "errored before the agent answered), so there is nothing to re-score; run "
                "the agent again with `evalkit run`",
                code="nothing-to-score",
            )
        round_ = await store.open_round(conn, experiment_id, only, call.actor.user_id)
        if only is not None:
            rerun, rerun_custom = identities(only)
            await store.carry_forward(conn, experiment_id, round_, rerun, rerun_custom)
        await queue.defer_scoring(conn, run_ids, round_, only)
    async with call.db.connection() as conn:
        found = [r for r in await _rounds(conn, experiment_id) if r.round == round_]
    opened = found[0] if found else wire.ScoringRound(experiment_id=experiment_id, round=round_)
    opened.runs = len(run_ids)
    return opened


async def _rounds(conn: Any, experiment_id: int) -> list[wire.ScoringRound]:
    jobs = await procrastinate_adapter.jobs_per_round(conn, queue.SCORE_RUN, experiment_id)
    return await store.rounds(conn, experiment_id, jobs)


async def _refuse_what_lives_in_the_script(call: Call, experiment_id: int) -> None:
    """An SDK experiment is re-scored here unless its script holds part of its scoring:
    Python evaluators scored it, or run_experiment's own judge grades its rubrics."""
    async with call.db.connection() as conn:
        python = await store.python_evaluators(conn, experiment_id)
        sdk_judge = await runs_store.judged_by_sdk(conn, experiment_id)
    again = (
        f"re-score it from the script with evalkit.sdk.evaluate_experiment("
        f"experiment_id={experiment_id}, evaluators=[...])"
    )
    if python:
        raise Conflict(
            f"experiment {experiment_id} was scored by Python evaluators "
            f"({', '.join(python)}), which live in your script, where the server cannot call "
            f"them; {again}",
            code="python-evaluators",
        )
    if sdk_judge:
        raise Conflict(
            f"experiment {experiment_id}'s rubrics are graded by the judge given to "
            f"run_experiment, with your script's key, which the server does not hold; {again}",
            code="sdk-judge",
        )


def _evaluator_names(names: list[str] | None) -> list[str] | None:
    if names is None:
        return None
    if not names:
        raise BadRequest(
            "evaluators is an empty list; name at least one, or leave it out to run every "
            "evaluator the cases select",
            code="bad-evaluator",
        )
    known = selector_names()
    bad = [
        n
        for n in names
        if n not in known
        and not (n.startswith("custom.") and CUSTOM_NAME_RE.match(n.removeprefix("custom.")))
        and not (n.startswith("judges.") and n.removeprefix("judges.") in LIBRARY_JUDGES)
    ]
    if bad:
        raise BadRequest(
            f"unknown evaluator {', '.join(map(repr, bad))}; name a built-in "
            f"({', '.join(known[:-3])}), judge, judges (every library judge), judges.NAME "
            f"({', '.join(LIBRARY_JUDGES)}), custom (every custom evaluator) or custom.NAME",
            code="bad-evaluator",
        )
    return list(dict.fromkeys(names))


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/runs/{run}/scores",
        run_scores,
        "A run's scores, every scoring round, newest first (?round=N: one round)",
        returns=list[wire.Score],
        tags=["scores"],
    ),
    Endpoint(
        "GET",
        "/api/experiments/{experiment}/rounds",
        experiment_rounds,
        "An experiment's scoring rounds, newest first, with totals per score name",
        returns=list[wire.ScoringRound],
        tags=["scores"],
    ),
    Endpoint(
        "POST",
        "/api/experiments/{experiment}/evaluate",
        experiment_evaluate,
        "Re-score an experiment's stored runs in a new scoring round (the agent is not run)",
        body=wire.EvaluateRequest,
        returns=wire.ScoringRound,
        status=201,
        tags=["scores"],
    ),
]
