"""``evalkit run``, ``evalkit experiments ...`` and ``evalkit runs show``."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from cyclopts import App, Parameter

from evalkit.cli.agents import key_from_env
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.errors import EvalkitError
from evalkit.model import api
from evalkit.model import runs as wire
from evalkit.model.agents import Agent
from evalkit.model.runs import TERMINAL

if TYPE_CHECKING:
    from evalkit.harness.client import HarnessClient
    from evalkit.http1 import Http1Client
    from evalkit.model.harness import Capabilities

experiments = App(name="experiments", help="Experiments: one agent over one dataset's cases.")
runs = App(name="runs", help="Runs: one case and repetition of an experiment.")


def run(
    dataset: Annotated[
        str | None,
        Parameter(
            help="NAME@WORKSPACE of a dataset, NAME for your personal one, or a suite "
            "directory (synced first, into --workspace). A NAME that is a suite directory "
            "under evalkit.yaml's cases_dir is synced first too."
        ),
    ] = None,
    /,
    *,
    agent: Annotated[
        str | None, Parameter(help="NAME@WORKSPACE of the agent (NAME: your personal one).")
    ] = None,
    workspace: Annotated[
        str | None,
        Parameter(help="Where a suite directory is synced (default: your personal workspace)."),
    ] = None,
    case_id: Annotated[
        list[str] | None, Parameter(name="--case-id", help="Run only this case (repeatable).")
    ] = None,
    split: Annotated[str | None, Parameter(help="Run only the cases of this split.")] = None,
    repetitions: Annotated[int, Parameter(help="Runs per case (1 to 100).")] = 1,
    model: Annotated[str | None, Parameter(help="Model name passed to the harness.")] = None,
    resume: Annotated[
        int | None,
        Parameter(help="Go on with this experiment's unfinished runs (no sync, same cases)."),
    ] = None,
    wait: Annotated[
        bool,
        Parameter(
            negative="--no-wait",
            help="Wait for the experiment to finish (--no-wait: print its id and return; "
            "only for server-driven agents).",
        ),
    ] = True,
    json: JsonFlag = False,
) -> int:
    """Run an agent over every case of a dataset (review never filters a run).

    The case versions are pinned when the experiment starts. A shared agent with a
    harness is driven by the server; a personal one by this command, on this machine, so
    it must stay running (or be continued with --resume). Exits 1 if any run failed or
    errored.
    """
    if resume is None and (dataset is None or agent is None):
        raise CliError("give a DATASET and --agent NAME (or --resume EXPERIMENT_ID)", exit_code=2)
    if resume is not None and (dataset or agent or case_id or split or model):
        raise CliError(
            "--resume goes on with the experiment as it was started; drop the dataset, "
            "--agent, --case-id, --split and --model",
            exit_code=2,
        )
    if not 1 <= repetitions <= 100:
        raise CliError("--repetitions must be from 1 to 100", exit_code=2)
    with Client() as client:
        if resume is not None:
            experiment = client.post(f"/api/experiments/{resume}/resume", type=wire.Experiment)
            agent_ref = experiment.agent
        else:
            assert dataset is not None and agent is not None
            dataset_ref = _dataset_ref(client, dataset, workspace)
            agent_ref = str(client.resolve(agent, "agent"))
            local = _local_harness(client, agent_ref)
            if local and not wait:
                raise CliError(
                    f"agent {agent_ref} is personal, so this CLI drives its runs and cannot "
                    "return before they end; drop --no-wait (an interrupted run goes on with "
                    "`evalkit run --resume ID`)",
                    exit_code=2,
                )
            body = wire.ExperimentCreate(
                dataset=dataset_ref,
                agent=agent_ref,
                case_ids=case_id or None,
                split=split,
                repetitions=repetitions,
                model=model,
                capabilities=local[1] if local else None,
            )
            experiment = client.post("/api/experiments", body, type=wire.Experiment)
        note(
            f"experiment {experiment.id}: {experiment.agent} over {experiment.dataset}, "
            f"{experiment.runs} runs, driven by {_driver_text(experiment.driver)}"
        )
        if experiment.driver == "cli":
            if not wait:
                raise CliError(
                    f"experiment {experiment.id} is driven by this CLI, so it cannot return "
                    f"before the runs end; continue it with `evalkit run --resume {experiment.id}`"
                )
            _drive_here(client, experiment, agent_ref)
        elif not wait:
            if json:
                emit_json(experiment)
            else:
                say(
                    f"experiment {experiment.id} started; "
                    f"see `evalkit experiments show {experiment.id}`"
                )
            return 0
        final = _wait(client, experiment.id)
    return _report(final, json=json)


def _dataset_ref(client: Client, dataset: str, workspace: str | None) -> str:
    """``name@workspace`` of the dataset to run, syncing its suite directory first when
    DATASET names one (a path, or a suite NAME under evalkit.yaml's cases_dir)."""
    path = _suite_dir(dataset)
    if path is None:
        if workspace is not None:
            raise CliError(
                f"--workspace is for syncing a suite directory, and {dataset!r} is none (nor "
                "a suite under evalkit.yaml's cases_dir); name the dataset as NAME@WORKSPACE",
                exit_code=2,
            )
        return str(client.resolve(dataset, "dataset"))
    from evalkit.cli.sync import sync

    target = workspace or client.personal_workspace()
    if not Path(dataset).is_dir():
        note(f"{dataset} is the suite {path} (evalkit.yaml's cases_dir): syncing it first")
    with contextlib.redirect_stdout(sys.stderr):
        sync(path, workspace=target)
    return f"{path.resolve().name}@{target}"


def _suite_dir(dataset: str) -> Path | None:
    """The suite directory `evalkit run` syncs first: DATASET itself when it is a directory,
    or a bare NAME (no ``@``) that is a directory under the cases_dir of the nearest
    evalkit.yaml, as run_experiment(dataset=NAME) does. None: a dataset on the server."""
    path = Path(dataset)
    if path.is_dir():
        return path
    if "@" in dataset or len(path.parts) != 1:
        return None
    from evalkit.cli.sync import project_near

    project = project_near(Path.cwd())
    if project is None:
        return None
    candidate = project.suite_dir(dataset)
    return candidate if candidate.is_dir() else None


def _driver_text(driver: str) -> str:
    return {"server": "the server", "cli": "this CLI", "sdk": "your code"}.get(driver, driver)


def _agent(client: Client, agent_ref: str) -> tuple[Agent, api.Workspace]:
    name, _, ws = agent_ref.partition("@")
    agent = client.get(f"/api/workspaces/{ws}/agents/{name}", type=Agent)
    workspace = client.get(f"/api/workspaces/{ws}", type=api.Workspace)
    return agent, workspace


def _local_harness(client: Client, agent_ref: str) -> tuple[Agent, Capabilities] | None:
    """For a personal harness agent, its capabilities as read from this machine."""
    import asyncio  # here, as in the other helpers: only a run this CLI drives needs them

    agent, workspace = _agent(client, agent_ref)
    if workspace.kind != "personal" or not agent.harness_url:
        return None
    return agent, asyncio.run(_read_capabilities(agent))


async def _read_capabilities(agent: Agent) -> Capabilities:
    from evalkit.http1 import Http1Client

    async with Http1Client(None, timeout=30.0, connect_timeout=30.0) as http:
        try:
            return await _harness(agent, http).capabilities()
        except EvalkitError as exc:
            raise CliError(
                f"agent {agent.name}@{agent.workspace}: cannot read the harness's capabilities "
                f"({exc}); is it running at {agent.harness_url}?"
            ) from None


def _harness(agent: Agent, http: Http1Client) -> HarnessClient:
    from evalkit.harness.client import HarnessClient

    assert agent.harness_url is not None
    return HarnessClient(agent.harness_url, key_from_env(agent), http)


def _drive_here(client: Client, experiment: wire.Experiment, agent_ref: str) -> None:
    import asyncio

    from evalkit.http1 import Http1Client
    from evalkit.runs.local import ServerError, ServerLink, drive_experiment

    agent, _ = _agent(client, agent_ref)
    total = experiment.runs
    finished = [sum(experiment.by_state.get(s, 0) for s in TERMINAL)]

    def ended(work: wire.RunWork) -> None:
        finished[0] += 1
        note(f"  [{finished[0]}/{total}] {work.case_id} #{work.repetition}: {work.state}")

    async def main() -> None:
        link = ServerLink(client.base_url, client.token)
        async with Http1Client(None, timeout=60.0, connect_timeout=60.0) as http:
            harness = _harness(agent, http)
            capabilities = await harness.capabilities()
            try:
                await drive_experiment(
                    link,
                    experiment.id,
                    harness,
                    capabilities,
                    concurrency=agent.max_concurrent_runs,
                    on_run_end=ended,
                )
            finally:
                await link.aclose()

    try:
        asyncio.run(main())
    except ServerError as exc:
        raise CliError(f"{exc}; continue with `evalkit run --resume {experiment.id}`") from None
    except EvalkitError as exc:
        raise CliError(f"{exc}; continue with `evalkit run --resume {experiment.id}`") from None


STALL_HINT_SECONDS = 60


def _wait(client: Client, experiment_id: int) -> wire.ExperimentDetail:
    shown, last_note = "", 0.0
    changed, hinted, previous = time.monotonic(), False, ""
    while True:
        detail = client.get(f"/api/experiments/{experiment_id}", type=wire.ExperimentDetail)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(detail.by_state.items()))
        line = f"  {_finished(detail)}/{detail.runs} finished ({counts})"
        now = time.monotonic()
        if line != previous:
            changed, previous = now, line
        if line != shown and (now - last_note >= 2 or detail.status == "finished"):
            note(line)
            shown, last_note = line, now
        if detail.status == "finished":
            return detail
        if not hinted and now - changed > STALL_HINT_SECONDS:
            note(
                f"  no run has moved for {STALL_HINT_SECONDS} s: the server's jobs move "
                "them, so check that a worker is running (`evalkit worker`, or "
                "`evalkit server --with-worker`)"
            )
            hinted = True
        time.sleep(0.5)


def _finished(detail: wire.Experiment) -> int:
    return sum(detail.by_state.get(s, 0) for s in TERMINAL)


def _report(detail: wire.ExperimentDetail, *, json: bool) -> int:
    bad = [r for r in detail.run_list if r.state in ("failed", "errored")]
    if json:
        emit_json(detail)
    else:
        seconds = (detail.summary or {}).get("seconds")
        took = f" in {seconds:.1f} s" if isinstance(seconds, int | float) else ""
        counts = ", ".join(f"{n} {s}" for s, n in sorted(detail.by_state.items()))
        say(f"experiment {detail.id} finished{took}: {counts}")
        for r in bad[:10]:
            say(f"  run {r.id} {r.case_id} #{r.repetition} {r.state}: {r.error or '-'}")
        if len(bad) > 10:
            say(f"  ... and {len(bad) - 10} more; see `evalkit experiments show {detail.id}`")
    return 1 if bad else 0


# --------------------------------------------------------------------------- experiments


@experiments.command(name="list")
def experiments_list(
    *,
    workspace: Annotated[str | None, Parameter(help="Only this workspace's experiments.")] = None,
    limit: Annotated[int, Parameter(help="At most this many, newest first.")] = 50,
    json: JsonFlag = False,
) -> int:
    """List experiments, newest first."""
    query = f"?limit={limit}" + (f"&workspace={workspace}" if workspace else "")
    with Client() as client:
        rows: list[wire.Experiment] = client.get(
            "/api/experiments" + query, type=list[wire.Experiment]
        )
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                e.id,
                e.workspace,
                e.dataset,
                e.agent,
                e.status,
                f"{_finished(e)}/{e.runs}",
                e.created_by,
                e.created_at,
            )
            for e in rows
        ],
        ["id", "workspace", "dataset", "agent", "status", "runs", "by", "created"],
    )
    return 0


@experiments.command(name="show")
def experiments_show(
    experiment_id: Annotated[int, Parameter(help="The experiment's id.")],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """One experiment: its runs by state, timings and errors, and which judge graded its
    rubrics (the server's, or the one run_experiment called from its process)."""
    with Client() as client:
        detail = client.get(f"/api/experiments/{experiment_id}", type=wire.ExperimentDetail)
    if json:
        emit_json(detail)
        return 0
    say(f"experiment {detail.id} ({detail.status}) in @{detail.workspace}")
    say(
        f"  agent {detail.agent}, dataset {detail.dataset}, driven by {_driver_text(detail.driver)}"
    )
    say(
        f"  repetitions {detail.repetitions}, model {detail.model or '-'}, "
        f"started {detail.created_at:%Y-%m-%d %H:%M:%S} by {detail.created_by or '-'}"
    )
    judge = detail.judge
    called = "the SDK" if judge is not None and judge.by == "sdk" else "the server"
    say(
        f"  judge {judge.name} at {judge.base_url}, called by {called}"
        if judge is not None
        else "  judge: none has graded a rubric"
    )
    counts = ", ".join(f"{n} {s}" for s, n in sorted(detail.by_state.items()))
    say(f"  runs: {detail.runs} ({counts})")
    say()
    table(
        [
            (
                r.id,
                r.case_id,
                r.repetition,
                r.state + (" (timed out)" if r.timed_out else ""),
                _seconds(r.started_at, r.harness_done_at or r.finished_at),
                _trajectory_text(r),
                (r.error or "")[:80] or None,
            )
            for r in detail.run_list
        ],
        ["run", "case", "rep", "state", "seconds", "trajectory", "error"],
    )
    return 0


def _seconds(start, end) -> str | None:  # type: ignore[no-untyped-def]
    if start is None or end is None:
        return None
    return f"{(end - start).total_seconds():.2f}"


def _trajectory_text(r: wire.RunRow) -> str | None:
    if r.trajectory_valid is None:
        return None
    text = "valid" if r.trajectory_valid else "INVALID"
    return text + (", partial" if r.trajectory_partial else "")


# --------------------------------------------------------------------------- runs


def _print_events(events: list[wire.RunEvent]) -> None:
    """The run's state changes, one line each: when, from -> to, by whom, why."""
    if not events:
        return
    say("  state changes:")
    for e in events:
        attempt = f" (attempt {e.attempts})" if e.attempts else ""
        why = f": {e.why}" if e.why else ""
        say(f"    {e.at:%H:%M:%S} {e.from_state} -> {e.to_state}{attempt} by {e.actor}{why}")


@runs.command(name="show")
def runs_show(
    run_id: Annotated[int, Parameter(help="The run's id (see `evalkit experiments show`).")],
    /,
    *,
    trajectory: Annotated[
        bool, Parameter(help="Include the whole trajectory (with --json).")
    ] = False,
    json: JsonFlag = False,
) -> int:
    """One run: its state, the answer and output, errors and a trajectory summary."""
    suffix = "?trajectory=1" if trajectory else ""
    with Client() as client:
        r = client.get(f"/api/runs/{run_id}{suffix}", type=wire.Run)
        if json:
            emit_json(r)
            return 0
        _show_run(client, r)
    # ---- scores, every round (evalkit/cli/scores.py)
    from evalkit.cli.scores import print_run_scores

    print_run_scores(r.id)
    from evalkit.cli.labels import print_run_labels

    with Client() as client:
        print_run_labels(client, r.id)
    return 0


def _no_spans(client: Client, r: wire.Run) -> tuple[str, list[str]] | None:
    """Why a traced run has no trajectory, and what to check, when no span of its session
    reached its agent: its session id looked up in every agent."""
    from urllib.parse import quote

    import msgspec

    from evalkit.model.otel import TraceSession
    from evalkit.model.run_list import ExperimentBrief
    from evalkit.otel.missing import awaited_spans, no_spans

    if not awaited_spans(r):
        return None
    brief = client.get(f"/api/experiments/{r.experiment_id}/brief?scores=0", ExperimentBrief)
    answer = client.http.get(f"/api/traces/{quote(r.session_id or '', safe='')}")
    found: list[TraceSession] = []
    if answer.status_code == 200:
        found = msgspec.json.decode(answer.content, type=list[TraceSession])
    elif answer.status_code != 404:
        raise CliError(client.explain(answer))
    missing = no_spans(r, brief.agent, found)
    return None if missing is None else (missing.summary, missing.checks)


def _show_run(client: Client, r: wire.Run) -> None:
    say(
        f"run {r.id} of experiment {r.experiment_id}: "
        f"case {r.case_id} v{r.case_version} #{r.repetition}"
    )
    say(
        f"  state {r.state}{' (timed out)' if r.timed_out else ''}; "
        f"harness run {r.harness_run_id or '-'} ({r.harness_status or '-'})"
    )
    if r.error:
        say(f"  error: {r.error}")
    say(f"  answer: {r.answer if r.answer is not None else '-'}")
    if r.output is not None:
        say(f"  output: {r.output}")
    missing = _no_spans(client, r)
    if r.trajectory_valid is None:
        say("  trajectory: none")
    elif missing is not None:
        summary, checks = missing
        say(f"  trajectory ({r.trajectory_source}): none, {summary}")
        say("    check:")
        for line in checks:
            say(f"    - {line}")
    else:
        state = "valid" if r.trajectory_valid else "INVALID"
        say(
            f"  trajectory ({r.trajectory_source}): {state}"
            f"{', partial' if r.trajectory_partial else ''}"
        )
        for e in r.trajectory_errors[:20]:
            say(f"    {e.path or '(document)'}: [{e.rule}] {e.message}")
        for key, value in (r.trajectory_summary or {}).items():
            if value not in (None, [], {}):
                say(f"    {key}: {value}")
    _print_events(r.events)


# Commands of these groups that live in other modules, imported when they run.
experiments.command("evalkit.cli.compare:experiments_scores", name="scores")
experiments.command("evalkit.cli.compare:experiments_compare", name="compare")
experiments.command("evalkit.cli.scores:experiments_rounds", name="rounds")
runs.command("evalkit.cli.scores:runs_scores", name="scores")
runs.command("evalkit.cli.labels:runs_label", name="label")
experiments.command("evalkit.cli.labels:experiments_agreement", name="agreement")
experiments.command("evalkit.cli.labels:experiments_label_queue", name="label-queue")
