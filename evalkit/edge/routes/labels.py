"""Human labels on runs: a person's reading of one of a run's scores, kept beside it."""

from __future__ import annotations

import math

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.run_list import _paging
from evalkit.errors import BadRequest
from evalkit.model import labels as wire
from evalkit.model.names import whole_number
from evalkit.model.stats import Agreement
from evalkit.scoring.agreement import agreements
from evalkit.store import labels as store
from evalkit.store import runs as runs_store
from evalkit.store.workspaces import get_workspace


def _id(call: Call, what: str) -> int:
    text = call.param(what)
    number = whole_number(text)
    if number is None:
        raise BadRequest(f"{what} ids are whole numbers, got {text!r}")
    return number


async def run_labels(call: Call) -> list[wire.Label]:
    access.require_read(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        await store.label_target(conn, run_id)  # 404 for no such run
        return await store.run_labels(conn, run_id)


async def label_run(call: Call) -> wire.Label:
    access.require_user(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        target = await store.label_target(conn, run_id)
        ws = await get_workspace(conn, call.actor, target.workspace)
    access.require_label(call.actor, ws.facts)
    body: wire.LabelRequest = await call.payload()
    _check(body, target)
    async with call.db.connection() as conn:
        return await store.add_label(conn, run_id, body, call.actor.user_id, call.actor.username)


async def experiment_agreement(call: Call) -> list[Agreement]:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        await runs_store.experiment_row(conn, experiment_id)  # 404 for no such experiment
        readings = await store.agreement_readings(conn, experiment_id)
    return agreements(readings)


async def label_queue(call: Call) -> wire.LabelQueue:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    offset, limit = _paging(call, 20)
    name = call.request.query_params.get("score") or None
    async with call.db.connection() as conn:
        await runs_store.experiment_row(conn, experiment_id)  # 404 for no such experiment
        return await store.label_queue(conn, experiment_id, name, offset, limit)


def _check(body: wire.LabelRequest, target: store.LabelTarget) -> None:
    if body.name not in target.score_names:
        scored = ", ".join(target.score_names) or "none yet (score it first)"
        raise BadRequest(
            f"run {target.run_id} has no evaluator score named {body.name!r}; a label reads "
            f"one of its scores: {scored}",
            code="no-such-score",
        )
    if not (math.isfinite(body.value) and 0 <= body.value <= 1):
        raise BadRequest(
            f"a label's value is 1 (pass), 0 (fail) or a number between 0 and 1, got "
            f"{body.value!r}",
            code="bad-label-value",
        )


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/runs/{run}/labels",
        run_labels,
        "A run's human labels, oldest first, with who gave each",
        returns=list[wire.Label],
        tags=["labels"],
    ),
    Endpoint(
        "POST",
        "/api/runs/{run}/labels",
        label_run,
        "Add a human label to one of a run's scores (never replaces an earlier label)",
        body=wire.LabelRequest,
        returns=wire.Label,
        status=201,
        tags=["labels"],
    ),
    Endpoint(
        "GET",
        "/api/experiments/{experiment}/agreement",
        experiment_agreement,
        "Per score with human labels: agreement with the people, its interval, Cohen's "
        "kappa, the confusion table and the runs where they disagree",
        returns=list[Agreement],
        tags=["labels"],
    ),
    Endpoint(
        "GET",
        "/api/experiments/{experiment}/label-queue",
        label_queue,
        "The experiment's labelling queue: runs with a judge score and no human label of "
        "it yet, in a stable sampled order (?score=NAME, ?offset=, ?limit= up to 200)",
        returns=wire.LabelQueue,
        tags=["labels"],
    ),
]
