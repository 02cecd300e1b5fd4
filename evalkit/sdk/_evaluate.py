"""evaluate_experiment: re-score an SDK experiment from the script that holds its Python
evaluators, in a new scoring round.

The round re-runs the Python evaluators given here on every run that reached scoring and
carries every other score forward. With ``refetch_trajectories``, a traced run whose
trajectory was partial or missing has it built again from its session's spans (which may
have arrived since); the server's own evaluators (built-ins, judge, remote evaluators)
score those runs afresh in the new round. When this process's judge grades the
experiment's rubrics (it recorded one when it started), that judge grades those runs
again here, with evalkit.yaml's key.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from evalkit.model import runs as wire
from evalkit.model.runs import agent_failed
from evalkit.model.sdk import (
    ExperimentCases,
    PythonScore,
    PythonScores,
    SdkRound,
    SdkRoundOpened,
    TrajectoryRefetched,
)
from evalkit.runs.local import ServerError
from evalkit.sdk._evaluators import PythonEvaluator, check_evaluators, not_judged, score_run
from evalkit.sdk._link import SdkLink, login
from evalkit.sdk._model import EvalRun, ExperimentResult, SdkError
from evalkit.sdk._progress import say

if TYPE_CHECKING:
    from evalkit.sdk._judge import SdkJudge

SCORED = ("done", "failed")
CONCURRENCY = 8


def evaluate_experiment(**options: Any) -> ExperimentResult:
    """Re-score experiment ``experiment_id`` with ``evaluators`` (see
    :func:`aevaluate_experiment`); refuses to run inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aevaluate_experiment(**options))
    raise SdkError(
        "evaluate_experiment cannot run inside a running event loop; use "
        "`await evalkit.sdk.aevaluate_experiment(...)`"
    )


async def aevaluate_experiment(
    *,
    experiment_id: int,
    evaluators: Sequence[PythonEvaluator] = (),
    refetch_trajectories: bool = False,
    server_url: str | None = None,
    timeout: float | None = None,
) -> ExperimentResult:
    """Open a new scoring round of experiment ``experiment_id`` (an SDK experiment you ran,
    finished), re-run ``evaluators`` on its scored runs and wait until the server has
    re-scored the runs whose trajectory was read again. Returns the experiment with the
    new round's summary."""
    chosen = check_evaluators(evaluators)
    if not chosen and not refetch_trajectories:
        raise SdkError(
            "give the Python evaluators to re-run (evaluators=[...]), or "
            "refetch_trajectories=True to read missing trajectories again"
        )
    import httpx

    from evalkit.sdk._judge import recorded_judge

    base, token = login(server_url)
    link = SdkLink(base, token)
    http = httpx.AsyncClient(timeout=300.0)  # the judge's
    try:
        detail = await link.get(f"/api/experiments/{experiment_id}", wire.ExperimentDetail)
        if detail.driver != "sdk":
            raise SdkError(
                f"experiment {experiment_id} was not run with run_experiment; re-score it on "
                f"the server with `evalkit evaluate {experiment_id}`"
            )
        scored = [r for r in detail.run_list if r.state in SCORED]
        rescore: list[int] = []
        if refetch_trajectories:
            rescore = await _refetch(link, scored)
        opened = await link.post_json(
            f"/api/experiments/{experiment_id}/sdk-rounds",
            SdkRound(evaluators=[e.name for e in chosen], rescore_runs=rescore),
            SdkRoundOpened,
        )
        say(
            f"experiment {experiment_id}: scoring round {opened.round}, "
            f"{len(chosen)} Python evaluator(s) over {len(scored)} runs"
            + (f", {len(rescore)} trajectories read again" if rescore else "")
        )
        # The server does not grade the rubrics of an experiment this process's judge
        # grades: the runs it re-scores get that judge's verdict on the new trajectory here.
        judge: SdkJudge | None = recorded_judge(detail, None, http) if rescore else None
        if chosen or judge is not None:
            await _score_round(link, experiment_id, opened.round, scored, chosen, judge, rescore)
        await _wait_round(link, experiment_id, opened.round, timeout)
        final = await link.get(f"/api/experiments/{experiment_id}", wire.ExperimentDetail)
        scores = await link.get(f"/api/experiments/{experiment_id}/scores")
        return ExperimentResult.of(final, scores, link.base_url)
    finally:
        await http.aclose()
        await link.aclose()


async def _score_round(
    link: SdkLink,
    experiment_id: int,
    round_no: int,
    scored: list[wire.RunRow],
    chosen: list[PythonEvaluator],
    judge: SdkJudge | None,
    rescore: list[int],
) -> None:
    """Post the round's scores from this process, ``CONCURRENCY`` runs at a time: the
    Python evaluators' on every scored run, and the judge's on the runs whose trajectory
    was read again."""
    cases = await link.get(f"/api/experiments/{experiment_id}/cases", ExperimentCases)
    contents = {c.case_id: c.content for c in cases.cases}
    slots = asyncio.Semaphore(CONCURRENCY)
    regraded = set(rescore)

    async def one(run_id: int) -> None:
        async with slots:
            again = judge if run_id in regraded else None
            await _score(link, run_id, chosen, contents, round_no, again)

    await asyncio.gather(*(one(r.id) for r in scored if chosen or r.id in regraded))


evaluate_experiment.__signature__ = inspect.signature(aevaluate_experiment)  # type: ignore[attr-defined]


async def _refetch(link: SdkLink, runs: list[wire.RunRow]) -> list[int]:
    """Read the trajectory of each run whose trajectory is partial or missing again;
    returns the runs whose trajectory changed."""
    changed = []
    for run in runs:
        if run.trajectory_valid and not run.trajectory_partial:
            continue
        try:
            answer = await link.post_json(
                f"/api/runs/{run.id}/trajectory/refetch", type=TrajectoryRefetched
            )
        except ServerError as exc:
            if "[no-session]" in str(exc):
                continue  # its trajectory came from the task, not from traces
            raise
        if answer.changed:
            changed.append(run.id)
    return changed


async def _score(
    link: SdkLink,
    run_id: int,
    evaluators: list[PythonEvaluator],
    contents: dict[str, dict[str, Any]],
    round_: int,
    judge: Any = None,
) -> None:
    """Re-run ``evaluators`` on one run (and ``judge`` on its rubric, when given) and post
    the scores into ``round_``."""
    run = await link.get(f"/api/runs/{run_id}?trajectory=1", wire.Run)
    content = contents.get(run.case_id)
    if content is None:
        return
    block = content.get("evaluators")
    judged = judge is not None and isinstance(block, dict) and block.get("judge") is not None
    if agent_failed(run.harness_status, run.timed_out):
        skipped = not_judged(evaluators, content, run.id, judge=judged)
        if skipped:
            await link.post_json(
                f"/api/runs/{run_id}/scores", PythonScores(scores=skipped, round=round_)
            )
        return
    answer = run.answer
    if answer is None and run.output is not None:
        answer = msgspec.json.encode(run.output, order="sorted").decode()
    trajectory = run.trajectory if run.trajectory_valid else None
    evaluated = EvalRun(
        id=str(run.id),
        answer=answer,
        output=run.output,
        trajectory=trajectory,
        model=None,
        experiment_id=run.experiment_id,
        repetition=run.repetition,
    )
    scores: list[PythonScore] = (
        await score_run(evaluators, run.case_id, content, evaluated) if evaluators else []
    )
    if judged:
        scores += await judge.grade(
            run_id=run.id,
            experiment_id=run.experiment_id,
            case_id=run.case_id,
            repetition=run.repetition,
            content=content,
            answer=answer,
            output=run.output,
            trajectory=trajectory,
            model=None,
        )
    if scores:
        await link.post_json(
            f"/api/runs/{run_id}/scores", PythonScores(scores=scores, round=round_)
        )


async def _wait_round(
    link: SdkLink, experiment_id: int, round_: int, timeout: float | None
) -> None:
    """Until the server's scoring jobs of the round are over."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        rounds = await link.get(f"/api/experiments/{experiment_id}/rounds")
        found = [r for r in rounds if r["round"] == round_]
        if not found or not found[0].get("pending_jobs"):
            return
        if deadline is not None and time.monotonic() > deadline:
            raise SdkError(
                f"the server had not finished re-scoring round {round_} of experiment "
                f"{experiment_id} within {timeout:g} s; it goes on there (see `evalkit "
                f"experiments show {experiment_id}`)"
            )
        await asyncio.sleep(0.2)
