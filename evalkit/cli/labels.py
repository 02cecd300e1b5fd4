"""``evalkit runs label``: a person's reading of one of a run's scores."""

from __future__ import annotations

from typing import Annotated

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
