"""``evalkit runs label``: a person's reading of one of a run's scores."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say
from evalkit.model import labels as wire

READINGS = {"pass": 1.0, "fail": 0.0}


def runs_label(
    run_id: Annotated[int, Parameter(help="The run's id (see `evalkit experiments show`).")],
    /,
    *,
    score: Annotated[
        str,
        Parameter(
            help="NAME=VALUE: the score read and your reading of it, pass, fail or a number "
            "from 0 to 1 (e.g. --score judge=fail or --score correctness=0.5)."
        ),
    ],
    comment: Annotated[str | None, Parameter(help="Why, in a sentence.")] = None,
    json: JsonFlag = False,
) -> int:
    """Record your reading of one of a run's scores, beside the evaluator's. Earlier labels,
    yours and other people's, are kept; `evalkit runs show` lists them all."""
    name, value = parse_reading(score)
    request = wire.LabelRequest(name=name, value=value, comment=comment)
    with Client() as client:
        label: wire.Label = client.post(f"/api/runs/{run_id}/labels", json=request, type=wire.Label)
    if json:
        emit_json(label)
        return 0
    say(f"run {run_id}: {name} labelled {_reading(label.value)} by {label.labelled_by}")
    return 0


def parse_reading(text: str) -> tuple[str, float]:
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip().lower()
    if not sep or not name or not raw:
        raise CliError(f"--score takes NAME=VALUE (e.g. judge=pass), got {text!r}")
    if raw in READINGS:
        return name, READINGS[raw]
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise CliError(f"--score {name}= takes pass, fail or a number from 0 to 1, got {raw!r}")
    return name, value


def _reading(value: float) -> str:
    return {1.0: "pass", 0.0: "fail"}.get(value, f"{value:g}")


def print_run_labels(client: Client, run_id: int) -> None:
    """The labels block of `evalkit runs show`."""
    labels: list[wire.Label] = client.get(f"/api/runs/{run_id}/labels", type=list[wire.Label])
    if not labels:
        return
    say("  human labels:")
    for label in labels:
        note = f" ({label.comment})" if label.comment else ""
        when = label.created_at.strftime("%Y-%m-%d %H:%M")
        say(f"    {label.name}: {_reading(label.value)} by {label.labelled_by} at {when}{note}")


def experiments_agreement(
    experiment_id: Annotated[
        int, Parameter(help="The experiment (see `evalkit experiments list`).")
    ],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """How often each evaluator agrees with the people who labelled its runs: the rate with
    its interval, Cohen's kappa, the confusion table and the runs where they disagree."""
    from evalkit.model.stats import Agreement

    with Client() as client:
        found: list[Agreement] = client.get(
            f"/api/experiments/{experiment_id}/agreement", type=list[Agreement]
        )
    if json:
        emit_json(found)
        return 0
    if not found:
        say(
            f"experiment {experiment_id}: no run has a human label yet; label runs with "
            "`evalkit runs label RUN --score NAME=pass|fail`"
        )
        return 0
    for a in found:
        _print_agreement(a)
    return 0


def _print_agreement(a: Any) -> None:
    rate = "n/a" if a.rate is None else f"{a.rate:.0%}"
    interval = f" [{a.interval[0]:.0%}, {a.interval[1]:.0%}]" if a.interval else ""
    kappa = "n/a" if a.kappa is None else f"{a.kappa:.2f}"
    say(f"{a.name}: agreement {rate}{interval} over {a.runs} runs, kappa {kappa}")
    c = a.confusion
    say(f"  evaluator pass: people pass {c['pass_pass']}, people fail {c['pass_fail']}")
    say(f"  evaluator fail: people pass {c['fail_pass']}, people fail {c['fail_fail']}")
    if a.split:
        say(f"  {a.split} runs left out: their labellers tied")
    for d in a.disagreements:
        people = "pass" if d.people_pass else "fail"
        say(f"  run {d.run_id} ({d.case_id}): scored {d.scored:g}, people say {people}")


def experiments_label_queue(
    experiment_id: Annotated[
        int, Parameter(help="The experiment (see `evalkit experiments list`).")
    ],
    /,
    *,
    score: Annotated[
        str | None, Parameter(help="Only this judge score (judge, judge.NAME); default: all.")
    ] = None,
    limit: Annotated[int, Parameter(help="Entries to show, from the head of the queue.")] = 20,
    json: JsonFlag = False,
) -> int:
    """The runs still waiting for a person's reading of their judge score, in the queue's
    stable sampled order; label them with `evalkit runs label` or on the web page
    /experiments/ID/label."""
    query = urlencode({"limit": limit, **({"score": score} if score else {})})
    with Client() as client:
        queue: wire.LabelQueue = client.get(
            f"/api/experiments/{experiment_id}/label-queue?{query}", type=wire.LabelQueue
        )
    if json:
        emit_json(queue)
        return 0
    if not queue.total:
        say(f"experiment {experiment_id}: no judge score waits for a human label")
        return 0
    say(f"experiment {experiment_id}: {queue.total} judge scores wait for a human label")
    for q in queue.runs:
        say(f"  run {q.run_id} ({q.case_id}): {q.name} {_reading(q.value)}")
    if queue.total > len(queue.runs):
        say(f"  ... and {queue.total - len(queue.runs)} more (--limit)")
    return 0
