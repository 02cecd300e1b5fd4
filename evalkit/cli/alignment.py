"""``evalkit judge align``: few-shot examples for a judge from the runs people labelled,
tried on those runs in a trial round, and applied only when someone accepts them."""

from __future__ import annotations

import time
from typing import Annotated

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say
from evalkit.model import judge_alignment as wire
from evalkit.model.stats import Agreement

POLL_SECONDS = 0.3


def judge_align(
    score: Annotated[
        str,
        Parameter(
            help="The judge: `judge` (the cases' rubric judge) or a library judge "
            "(judge.NAME, judges.NAME or NAME)."
        ),
    ],
    /,
    *,
    experiment: Annotated[int, Parameter(help="The experiment whose human labels to learn from.")],
    examples: Annotated[
        int, Parameter(help="The most few-shot examples to propose (1 to 32).")
    ] = 8,
    accept: Annotated[
        int | None,
        Parameter(help="Accept this proposal (its id, printed when it was made) instead."),
    ] = None,
    show: Annotated[
        int | None, Parameter(help="Show this proposal (its id) instead of making one.")
    ] = None,
    wait: Annotated[
        bool,
        Parameter(
            name="--wait",
            negative="--no-wait",
            help="Wait for the trial round to be graded (--no-wait: print the proposal at once).",
        ),
    ] = True,
    json: JsonFlag = False,
) -> int:
    """Propose few-shot examples for a judge from the experiment's labelled runs (every
    run where the judge and the people disagree, with the people's verdict), re-grade those
    runs with them in a trial scoring round, and report the agreement before and after.
    Nothing changes until you accept: `--accept ID` makes the examples the ones the judge of
    the experiment's workspace shows, and pins them in its prompt hash."""
    with Client() as client:
        if accept is not None:
            _matching(client, accept, score, experiment)
            found = client.post(f"/api/judge-proposals/{accept}/accept", type=wire.JudgeProposal)
        elif show is not None:
            found = _matching(client, show, score, experiment)
        else:
            body = wire.AlignRequest(score=score, max_examples=examples)
            found = client.post(
                f"/api/experiments/{experiment}/judge-proposals",
                json=body,
                type=wire.JudgeProposal,
            )
            if wait:
                found = _graded(client, found)
    if json:
        emit_json(found)
    else:
        _print(found)
    return 0


def _get(client: Client, proposal_id: int) -> wire.JudgeProposal:
    found: wire.JudgeProposal = client.get(
        f"/api/judge-proposals/{proposal_id}", type=wire.JudgeProposal
    )
    return found


def _matching(client: Client, proposal_id: int, score: str, experiment: int) -> wire.JudgeProposal:
    """The proposal, when it is one for this judge and experiment (a typo must not accept
    another judge's examples)."""
    found = _get(client, proposal_id)
    names = {score, f"judge.{score}", "judge." + score.removeprefix("judges.")}
    if found.experiment_id != experiment or found.score not in names:
        raise CliError(
            f"judge proposal {proposal_id} is for {found.score} of experiment "
            f"{found.experiment_id}, not {score} of experiment {experiment}"
        )
    return found


def _graded(client: Client, found: wire.JudgeProposal) -> wire.JudgeProposal:
    shown = ""
    while found.status == "grading":
        line = f"  {found.runs - found.pending_runs}/{found.runs} labelled runs re-graded"
        if line != shown:
            note(line)
            shown = line
        time.sleep(POLL_SECONDS)
        found = _get(client, found.id)
    return found


def _rate(a: Agreement | None) -> str:
    if a is None or a.rate is None:
        return "n/a"
    kappa = "n/a" if a.kappa is None else f"{a.kappa:.2f}"
    return f"{a.rate:.0%} ({a.agree} of {a.runs} runs), kappa {kappa}"


def _print(p: wire.JudgeProposal) -> None:
    say(f"judge proposal {p.id}: {p.score} of @{p.workspace}, from experiment {p.experiment_id}")
    say(f"  {len(p.examples)} few-shot examples; prompt {p.base_hash} -> {p.prompt_hash}")
    for e in p.examples:
        say(f"    run {e.run_id} ({e.case_id}): people say {e.verdict}")
    say(f"  agreement before: {_rate(p.before)}")
    if p.status == "grading":
        say(f"  agreement after: still grading ({p.pending_runs} of {p.runs} runs to go)")
    else:
        say(f"  agreement after:  {_rate(p.after)} (trial round {p.trial_round})")
    if p.failed_runs:
        say(f"  {p.failed_runs} re-grading jobs failed; see `evalkit worker` logs")
    if p.status == "accepted":
        say(
            f"  accepted by {p.accepted_by}: new {p.score} scores in @{p.workspace} use prompt "
            f"{p.prompt_hash}; re-score with `evalkit evaluate {p.experiment_id} --evaluator "
            f"{_selector(p.score)}`"
        )
    elif p.status == "stale":
        say("  stale: the judge's examples changed since; propose again")
    else:
        say(
            f"  nothing changed yet; accept with `evalkit judge align {p.score} --experiment "
            f"{p.experiment_id} --accept {p.id}`"
        )


def _selector(score: str) -> str:
    return "judge" if score == "judge" else "judges." + score.removeprefix("judge.")
