"""``evalkit try``: see the whole product work on this machine in one command."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.demo.run import DemoResult


def try_(
    *,
    data_dir: Annotated[
        Path | None,
        Parameter(
            help="Where the demo keeps its database and files (default: a 'try' folder "
            "in your user data directory, apart from a real server's)."
        ),
    ] = None,
    port: Annotated[
        int | None, Parameter(help="Port for the server (default: 8600 if free; 0: any free port).")
    ] = None,
    exit_: Annotated[
        bool,
        Parameter(name="--exit", help="Stop once the demo has run (for scripts and CI)."),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Run evalkit end to end on this machine: no Docker, no PostgreSQL to install.

    Starts an embedded PostgreSQL, the server and a worker; creates the admin (its password
    is printed once and kept in the data dir); syncs a sample suite into the workspace
    `demo`; runs it with the reference harness (driven by the server) and with a traced
    agent run by the Python SDK; prints the scores and the web UI's address; then keeps
    serving until Ctrl-C (or stops at once with --exit). Set EVALKIT_TRY_JUDGE_BASE_URL,
    EVALKIT_TRY_JUDGE_MODEL (and EVALKIT_TRY_JUDGE_API_KEY) to add an LLM judge.
    """
    from evalkit.demo.run import default_data_dir, run_demo

    def serve_on(result: DemoResult) -> None:
        _report(result, json)
        if exit_:
            return
        note(f"serving on {result.url}; Ctrl-C stops it")
        _wait_for_interrupt()

    try:
        run_demo(data_dir or default_data_dir(), port=port, say=note, keep_serving=serve_on)
    except EvalkitError as exc:
        raise CliError(exc.message) from None
    return 0


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _report(result: DemoResult, json: bool) -> None:
    if json:
        emit_json(
            {
                "url": result.url,
                "admin_password": result.password,
                "judged": result.judged,
                "experiments": result.experiments,
            }
        )
        return
    for agent, experiment in result.experiments.items():
        states = ", ".join(f"{n} {s}" for s, n in sorted(experiment["by_state"].items()))
        say(f"\nexperiment {experiment['id']} ({agent}): {states}")
        table(_score_rows(experiment["scores"]), ["score", "kind", "mean", "passed", "readings"])
        say(f"open it: {experiment['url']}")
    say(f"\nweb UI: {result.url}  (user admin)")
    if result.password:
        say(f"admin password (shown once; also in the data dir): {result.password}")
    if not result.judged:
        say("no LLM judge: set EVALKIT_TRY_JUDGE_BASE_URL and EVALKIT_TRY_JUDGE_MODEL to add one")


def _score_rows(scores: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for s in scores["scores"]:
        if s["kind"] == "gauge":
            mean = s.get("raw_mean")
            shown = "-" if mean is None else f"{mean:.4g}"
            passed = ""
        else:
            shown = "-" if s["mean"] is None else f"{s['mean']:.3f}"
            passed = "" if s.get("passes") is None else f"{s['passes']}/{s['readings']}"
        rows.append([s["name"], s["kind"], shown, passed, s["readings"]])
    return rows
