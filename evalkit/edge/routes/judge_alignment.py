"""Judge alignment: propose few-shot examples for a judge from an experiment's human labels,
try them on the labelled runs in a trial round, and accept them for the workspace.

A proposal changes nothing the judge does until it is accepted: its trial round is
numbered below zero (never the experiment's current round, never carried forward), and the
examples the workspace's judge shows are those of the last accepted proposal."""

from __future__ import annotations

from typing import Any

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.edge.routes.labels import _id
from evalkit.errors import BadRequest, Conflict
from evalkit.jobs import procrastinate_adapter, queue
from evalkit.model import judge_alignment as wire
from evalkit.model.stats import Agreement
from evalkit.scoring import alignment
from evalkit.scoring.agreement import agreements
from evalkit.store import judge_alignment as store
from evalkit.store import labels as labels_store
from evalkit.store import runs as runs_store
from evalkit.store.workspaces import get_workspace


async def propose(call: Call) -> wire.JudgeProposal:
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        experiment = await runs_store.experiment_row(conn, experiment_id)
        ws = await get_workspace(conn, call.actor, experiment.workspace)
    access.require_align_judge(call.actor, ws.facts, "propose examples for its judge")
    body: wire.AlignRequest = await call.payload()
    score = alignment.judge_score(body.score)
    if experiment.status != "finished":
        raise Conflict(
            f"experiment {experiment_id} is still running; align its judge once every run "
            f"has ended (`evalkit experiments show {experiment_id}`)",
            code="experiment-running",
        )
    async with call.db.transaction() as conn:
        if score == alignment.RUBRIC_SCORE and await runs_store.judged_by_sdk(conn, experiment_id):
            raise Conflict(
                f"experiment {experiment_id}'s rubrics are graded by the judge its SDK process "
                "was given, not by the server's, so the server cannot try examples on it; "
                "align the server's judge on an experiment it graded",
                code="judged-by-sdk",
            )
        before = await _agreement(conn, experiment_id, score, None)
        _check_worth_aligning(experiment_id, score, before)
        candidates = await store.candidates(conn, experiment_id, score)
        current = await store.accepted_examples(conn, experiment_id, score)
        examples = alignment.choose_examples(candidates, current, body.max_examples)
        base = alignment.prompt_hash(score, current)
        proposed = alignment.prompt_hash(score, examples)
        if proposed == base:
            raise BadRequest(
                f"the examples @{ws.facts.name}'s {score} judge shows already hold every "
                "disagreement; label more runs, or pass a larger max_examples",
                code="nothing-new",
            )
        proposal_id, trial = await store.insert_proposal(
            conn,
            experiment_id=experiment_id,
            score=score,
            examples=examples,
            prompt_hash=proposed,
            base_hash=base,
            runs=len(candidates),
            before=before,
            created_by=call.actor.user_id,
        )
        run_ids = [c.run_id for c in candidates]
        await queue.defer_scoring(conn, run_ids, trial, [alignment.evaluator_key(score)])
    async with call.db.connection() as conn:
        return await _proposal(conn, proposal_id)


def _check_worth_aligning(experiment_id: int, score: str, before: Agreement | None) -> None:
    if before is None or not before.runs:
        raise BadRequest(
            f"no run of experiment {experiment_id} has a human label of {score} (with a "
            "verdict: tied labellers give none), so there is nothing to align it with; label "
            f"runs on /experiments/{experiment_id}/label or with `evalkit runs label RUN "
            f"--score {score}=pass|fail`",
            code="no-labels",
        )
    if not before.disagreements:
        raise BadRequest(
            f"{score} agrees with the people on all {before.runs} labelled runs of "
            f"experiment {experiment_id}; there is no disagreement to learn from",
            code="judge-agrees",
        )


async def _agreement(conn: Any, experiment_id: int, score: str, round: int | None) -> Any:
    readings = await labels_store.agreement_readings(conn, experiment_id, round)
    return next((a for a in agreements(readings) if a.name == score), None)


async def _proposal(conn: Any, proposal_id: int) -> wire.JudgeProposal:
    row = await store.proposal_row(conn, proposal_id)
    experiment_id, trial, score = row["experiment_id"], row["trial_round"], row["name"]
    jobs = await procrastinate_adapter.jobs_per_round(conn, queue.SCORE_RUN, experiment_id)
    counts = jobs.get(trial)
    pending = counts.pending if counts else 0
    after = None if pending else await _agreement(conn, experiment_id, score, trial)
    current = alignment.prompt_hash(
        score, await store.accepted_examples(conn, experiment_id, score)
    )
    status: wire.ProposalStatus = "ready"
    if row["accepted_at"] is not None:
        status = "accepted"
    elif current != row["base_hash"]:
        status = "stale"
    elif pending:
        status = "grading"
    return wire.JudgeProposal(
        id=row["id"],
        experiment_id=experiment_id,
        workspace=row["workspace"],
        score=score,
        status=status,
        prompt_hash=row["prompt_hash"],
        base_hash=row["base_hash"],
        trial_round=trial,
        runs=row["runs"],
        pending_runs=pending,
        failed_runs=counts.failed if counts else 0,
        examples=row["examples"],
        before=row["before"],
        after=after,
        created_by=row["created_by"],
        created_at=row["created_at"],
        accepted_by=row["accepted_by"],
        accepted_at=row["accepted_at"],
    )


async def show(call: Call) -> wire.JudgeProposal:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await _proposal(conn, _id(call, "proposal"))


async def accept(call: Call) -> wire.JudgeProposal:
    access.require_user(call.actor)
    proposal_id = _id(call, "proposal")
    async with call.db.connection() as conn:
        found = await _proposal(conn, proposal_id)
        ws = await get_workspace(conn, call.actor, found.workspace)
    access.require_align_judge(call.actor, ws.facts, "accept examples for its judge")
    _check_acceptable(found, found.status)
    async with call.db.transaction() as conn:
        # Checked again where it counts: another accept may have come in between.
        refused = await store.accept(
            conn, await store.proposal_row(conn, proposal_id), call.actor.user_id
        )
        if refused is not None:
            _check_acceptable(found, refused)
    async with call.db.connection() as conn:
        return await _proposal(conn, proposal_id)


def _check_acceptable(found: wire.JudgeProposal, status: str) -> None:
    if status == "accepted":
        raise Conflict(
            f"judge proposal {found.id} was accepted already (by "
            f"{found.accepted_by or 'someone else'})",
            code="accepted",
        )
    if status == "grading":
        raise Conflict(
            f"judge proposal {found.id} is still being tried ({found.pending_runs} runs to "
            f"re-grade); accept it once `evalkit judge align {found.score} --experiment "
            f"{found.experiment_id} --show {found.id}` reports its agreement",
            code="proposal-grading",
        )
    if status == "stale":
        raise Conflict(
            f"@{found.workspace}'s {found.score} judge changed since judge proposal "
            f"{found.id} was made (it was made on prompt {found.base_hash}); propose again "
            f"with `evalkit judge align {found.score} --experiment {found.experiment_id}`",
            code="stale-proposal",
        )


ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/experiments/{experiment}/judge-proposals",
        propose,
        "Propose few-shot examples for a judge from the experiment's human labels and try "
        "them on its labelled runs in a trial scoring round (nothing changes until accepted)",
        body=wire.AlignRequest,
        returns=wire.JudgeProposal,
        status=201,
        tags=["labels"],
    ),
    Endpoint(
        "GET",
        "/api/judge-proposals/{proposal}",
        show,
        "A judge proposal: its examples, prompt hash, and agreement before and after",
        returns=wire.JudgeProposal,
        tags=["labels"],
    ),
    Endpoint(
        "POST",
        "/api/judge-proposals/{proposal}/accept",
        accept,
        "Accept a judge proposal: the workspace's judge shows its examples from now on",
        returns=wire.JudgeProposal,
        tags=["labels"],
    ),
]
