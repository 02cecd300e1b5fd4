"""``evalkit contracts export``: the machine-readable contracts, for harness and evaluator
authors. Needs no server: the documents come from the CLI's own Structs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, say
from evalkit.contracts import export

contracts = App(
    name="contracts",
    help="The contracts evalkit holds harnesses, trajectories and remote evaluators to.",
)


@contracts.command(name="export")
def contracts_export(
    *,
    target: Annotated[Path, Parameter(help="Directory to write into; created when missing.")],
    json: JsonFlag = False,
) -> int:
    """Write the contracts as JSON files into --target:

    harness-api-v1.json (OpenAPI 3.1 of the Harness API an agent's harness implements),
    atif-accepted.json (JSON Schema of the ATIF trajectories evalkit accepts) and
    custom-evaluator-api-v1.json (OpenAPI 3.1 of the Custom Evaluator API). They are
    generated from the structs this evalkit build uses, so they match it exactly. Point
    your implementation (or its tests) at them.
    """
    if target.exists() and not target.is_dir():
        raise CliError(f"{target} exists and is not a directory; pick another --target")
    try:
        written = export(target)
    except OSError as exc:
        raise CliError(f"cannot write into {target}: {exc.strerror or exc}") from None
    if json:
        emit_json({"target": str(target), "files": [str(p) for p in written]})
    else:
        for path in written:
            say(f"wrote {path}")
    return 0
