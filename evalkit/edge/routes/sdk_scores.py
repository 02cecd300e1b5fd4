"""The Python SDK's routes: the pinned cases its Python evaluators read, the scores they
give, a scoring round opened from a script (``evaluate_experiment``) and a traced run's
trajectory read again from its spans.

Writes are the experiment's creator's, and only for experiments the SDK drives: a Python
evaluator runs in the creator's process, the way the runs themselves did."""

from __future__ import annotations

import msgspec

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.experiments import TRANSITION_MAX_BODY
from evalkit.errors import BadRequest, Conflict
from evalkit.jobs import queue
from evalkit.jobs.settle import trajectory_from_spans
from evalkit.model import sdk as wire
from evalkit.model.harness import FINAL_STATUSES
from evalkit.model.names import whole_number
from evalkit.model.runs import TERMINAL
from evalkit.runs import engine
from evalkit.store import runs as runs_store
from evalkit.store import scores as scores_store
from evalkit.store import sdk_scores as store
from evalkit.store.otel import session_row, spans_for_session

MAX_TEXT = 4000
"""Characters kept of an explanation or an error (as for the server's evaluators)."""


def _id(call: Call, what: str) -> int:
    text = call.param(what)
    number = whole_number(text)
    if number is None:
        raise BadRequest(f"{what} ids are whole numbers, got {text!r}")
    return number


def _require_sdk_driver(call: Call, row: runs_store.ExperimentRow) -> None:
    if row.driver != "sdk":
        raise Conflict(
            f"experiment {row.id} was not run with evalkit.sdk.run_experiment (its runs are "
            f"driven by {'the server' if row.driver == 'server' else 'a CLI'}), so it takes "
            "no Python scores; its evaluators run on the server (`evalkit evaluate`)",
            code="not-sdk-driven",
        )
    access.require_driver(call.actor, row.created_by, row.created_by_name, row.id)


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 3] + "..."


# --------------------------------------------------------------------------- cases


async def experiment_cases(call: Call) -> wire.ExperimentCases:
    access.require_read(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        await runs_store.experiment_row(conn, experiment_id)  # 404 for no such experiment
        cases = await store.experiment_cases(conn, experiment_id)
    return wire.ExperimentCases(experiment_id=experiment_id, cases=cases)


# --------------------------------------------------------------------------- scores


async def run_scores_post(call: Call) -> wire.PythonScoresStored:
    access.require_user(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        run = await runs_store.run_row(conn, run_id)
        row = await runs_store.experiment_row(conn, run["experiment_id"])
        _require_sdk_driver(call, row)
        body: wire.PythonScores = await call.payload()
        current = await scores_store.run_round(conn, run_id)
        round_ = body.round or current
        if round_ > current:
            raise BadRequest(
                f"experiment {row.id} has no scoring round {round_} yet (its latest is "
                f"{current}); post into an open round",
                code="no-such-round",
            )
        names = [s.name for s in body.scores]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise BadRequest(
                f"score name {', '.join(map(repr, twice))} is given twice for run {run_id}; "
                "each score of a run needs its own name",
                code="duplicate-score",
            )
        scores = [_clipped(s) for s in body.scores]
        stored = await store.insert_python_scores(conn, run_id, round_, scores)
    kept = [n for n in names if n not in set(stored)]
    return wire.PythonScoresStored(run_id=run_id, round=round_, stored=stored, kept=kept)


# --------------------------------------------------------------------------- batches


async def sdk_steps(call: Call) -> wire.SdkBatchResult:
    """Steps and Python scores of several runs in one request and one transaction: an
    experiment with an instant task posts a few steps per run, and round trips, not the
    database, would bound it otherwise."""
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        row = await runs_store.experiment_row(conn, experiment_id)
        _require_sdk_driver(call, row)
        body: wire.SdkBatch = await call.payload()
        ids = sorted({t.run_id for t in body.steps} | {s.run_id for s in body.scores})
        async with conn.transaction():
            owned = await store.run_states(conn, experiment_id, ids)
            strangers = [i for i in ids if i not in owned]
            if strangers:
                raise BadRequest(
                    f"run {', '.join(map(str, strangers))} is no run of experiment "
                    f"{experiment_id}; post each experiment's steps to its own URL",
                    code="no-such-run",
                )
            actor = engine.driver_actor("sdk", call.actor.username)
            facts = row.facts
            applied = await engine.record_all(
                conn, body.steps, facts, actor=actor, scores_itself=True, close=False
            )
            last = {step.run_id: done for step, done in zip(body.steps, applied, strict=True)}
            scored: list[int] = []
            todo = [s for s in body.scores if last.get(s.run_id, True) and s.scores]
            if todo:
                round_ = await scores_store.run_round(conn, todo[0].run_id)
                given: dict[int, list[wire.PythonScore]] = {}
                for batch in todo:
                    given.setdefault(batch.run_id, []).extend(_clipped(s) for s in batch.scores)
                await store.insert_python_scores_of_runs(conn, round_, given)
                scored.extend(given)
            # After the Python scores: the server's evaluators see them, as its job would.
            reached = [
                step
                for step, done in zip(body.steps, applied, strict=True)
                if done and step.to_state == "scoring"
            ]
            in_place = await engine.score_in_place(conn, reached, facts)
            states = await store.run_states(conn, experiment_id, ids)
        if in_place or any(s.to_state in TERMINAL for s in body.steps):
            await engine.close_after_commit(conn, experiment_id)
    return wire.SdkBatchResult(
        applied=applied, states={str(k): v for k, v in states.items()}, scored=scored
    )


def _clipped(score: wire.PythonScore) -> wire.PythonScore:
    return wire.PythonScore(
        evaluator=score.evaluator,
        name=score.name,
        value=score.value,
        kind=score.kind,
        explanation=_clip(score.explanation),
        error=_clip(score.error),
        skipped=_clip(score.skipped),
        raw=score.raw,
        identity=score.identity,
        judge_model=score.judge_model,
        prompt_hash=score.prompt_hash,
        evaluator_version=score.evaluator_version,
    )


# --------------------------------------------------------------------------- rounds


async def sdk_round_open(call: Call) -> wire.SdkRoundOpened:
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        row = await runs_store.experiment_row(conn, experiment_id)
    _require_sdk_driver(call, row)
    body: wire.SdkRound = await call.payload()
    if row.status != "finished":
        raise Conflict(
            f"experiment {experiment_id} is still running; re-score it once every run has "
            f"ended (or go on with it: run_experiment(resume={experiment_id}, ...))",
            code="experiment-running",
        )
    async with call.db.transaction() as conn:
        scorable = set(await scores_store.scorable_runs(conn, experiment_id))
        strangers = sorted(set(body.rescore_runs) - scorable)
        if strangers:
            raise BadRequest(
                f"run {', '.join(map(str, strangers))} is no scored run of experiment "
                f"{experiment_id}; name runs that reached scoring",
                code="no-such-run",
            )
        evaluators = [wire.PYTHON_PREFIX + name for name in body.evaluators]
        round_ = await scores_store.open_round(conn, experiment_id, evaluators, call.actor.user_id)
        rescore = sorted(set(body.rescore_runs))
        await store.carry_forward(conn, experiment_id, round_, body.evaluators, rescore)
        await queue.defer_scoring(conn, rescore, round_, None)
    return wire.SdkRoundOpened(experiment_id=experiment_id, round=round_, rescored=rescore)


# --------------------------------------------------------------------------- trajectories


async def run_trajectory_refetch(call: Call) -> wire.TrajectoryRefetched:
    access.require_user(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        run = await store.run_for_refetch(conn, run_id)
        if run is None:
            await runs_store.run_row(conn, run_id)  # raises the usual 404
            raise AssertionError("unreachable")
        row = await runs_store.experiment_row(conn, run["experiment_id"])
        _require_sdk_driver(call, row)
        if not run["session_id"]:
            raise Conflict(
                f"run {run_id} has no session, so its trajectory did not come from traces "
                "and cannot be read again",
                code="no-session",
            )
        session = await session_row(conn, run["agent_id"], run["session_id"])
        record = await trajectory_from_spans(
            conn,
            run["agent_id"],
            run["session_id"],
            session,
            agent_name=run["agent_name"],
            cut_short=run["timed_out"] and run["harness_status"] not in FINAL_STATUSES,
            waited_seconds=0.0,
        )
        spans = (
            0
            if session is None
            else len(await spans_for_session(conn, run["agent_id"], run["session_id"]))
        )
        checked = await store.replace_trajectory(conn, run_id, record)
    before = run["trajectory"]
    after = msgspec.json.decode(checked["body"]) if checked["body"] else None
    changed = before != after or run["valid"] != checked["valid"]
    changed = changed or run["partial"] != checked["partial"]
    return wire.TrajectoryRefetched(
        run_id=run_id,
        session_id=run["session_id"],
        changed=changed,
        valid=checked["valid"],
        partial=checked["partial"],
        spans=spans,
    )


_EXP = "/api/experiments/{experiment}"

ENDPOINTS = [
    Endpoint(
        "GET",
        _EXP + "/cases",
        experiment_cases,
        "The pinned case versions of an experiment, overlays applied (what Python evaluators read)",
        returns=wire.ExperimentCases,
        tags=["sdk"],
    ),
    Endpoint(
        "POST",
        "/api/runs/{run}/scores",
        run_scores_post,
        "Store a Python evaluator's scores of a run your SDK drove (python:<name>)",
        body=wire.PythonScores,
        returns=wire.PythonScoresStored,
        tags=["sdk"],
    ),
    Endpoint(
        "POST",
        _EXP + "/sdk-steps",
        sdk_steps,
        "Record steps (compare-and-set) and Python scores of several runs your SDK drives, "
        "in one transaction",
        body=wire.SdkBatch,
        returns=wire.SdkBatchResult,
        tags=["sdk"],
        max_body=TRANSITION_MAX_BODY,
    ),
    Endpoint(
        "POST",
        _EXP + "/sdk-rounds",
        sdk_round_open,
        "Open a scoring round of an experiment your SDK ran, for evaluate_experiment",
        body=wire.SdkRound,
        returns=wire.SdkRoundOpened,
        status=201,
        tags=["sdk"],
    ),
    Endpoint(
        "POST",
        "/api/runs/{run}/trajectory/refetch",
        run_trajectory_refetch,
        "Build a traced run's trajectory again from its session's spans (SDK runs)",
        returns=wire.TrajectoryRefetched,
        tags=["sdk"],
    ),
]
