"""Experiments and runs: pinning cases, recording transitions, claiming agent slots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from evalkit.atif import summarize, validate_json
from evalkit.atif.model import Trajectory
from evalkit.blobs.signing import sign_fixture_url
from evalkit.cases.suite import apply_overlay
from evalkit.db import Conn, JsonBytes
from evalkit.errors import BadRequest, NotFound
from evalkit.model import runs as wire
from evalkit.model.harness import Capabilities, InputFile

_json = msgspec.json.Encoder()


def _dumps(value: Any) -> str | None:
    return None if value is None else _json.encode(value).decode()


# --------------------------------------------------------------------------- creating


class CasePin(msgspec.Struct, frozen=True):
    case_id: str
    version_id: int
    target_version_id: int | None


async def pin_cases(
    conn: Conn,
    *,
    workspace_id: int,
    dataset_id: int,
    dataset: str,
    case_ids: list[str] | None,
    split: str | None,
    fill: str = "sync cases into it first",
) -> list[CasePin]:
    """The current version of every case the experiment runs (review never filters).
    ``fill`` is how the dataset gets cases, said when it has none."""
    rows = await conn.all("experiment_case_pins", workspace_id=workspace_id, dataset_id=dataset_id)
    live = [row for row in rows if not row["removed"]]
    if case_ids:
        known = {row["case_id"] for row in live}
        unknown = [case_id for case_id in case_ids if case_id not in known]
        if unknown:
            raise BadRequest(
                f"dataset {dataset} has no case {', '.join(map(repr, unknown))}; "
                f"see `evalkit cases list {dataset}`",
                code="no-such-case",
            )
        wanted = set(case_ids)
        live = [row for row in live if row["case_id"] in wanted]
    pins = []
    for row in live:
        if row["overlay_target"] and row["target_version_id"] is None:
            raise BadRequest(
                f"case {row['case_id']} of {dataset} overlays case {row['overlay_target']!r}, "
                "which no dataset of the workspace has; sync the target first",
                code="overlay-target-missing",
            )
        if split is not None and _effective(row).get("split") != split:
            continue
        pins.append(CasePin(row["case_id"], row["version_id"], row["target_version_id"]))
    if not pins:
        which = f" in split {split!r}" if split is not None else ""
        raise BadRequest(
            f"dataset {dataset} has no cases to run{which}; {fill}",
            code="no-cases",
        )
    return pins


def _effective(row: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = row["content"]
    if row.get("target_content") is None:
        return content
    merged: dict[str, Any] = apply_overlay(row["target_content"], content)
    return merged


async def insert_experiment(
    conn: Conn,
    *,
    workspace_id: int,
    dataset_id: int,
    agent_id: int,
    driver: str,
    body: wire.ExperimentCreate,
    capabilities: Capabilities | None,
    created_by: int | None,
    pins: list[CasePin],
) -> int:
    row = await conn.one(
        "experiment_insert",
        workspace_id=workspace_id,
        dataset_id=dataset_id,
        agent_id=agent_id,
        driver=driver,
        repetitions=body.repetitions,
        model=body.model,
        split=body.split,
        case_ids=body.case_ids,
        capabilities=_dumps(capabilities),
        created_by=created_by,
        **_judge_columns(body.judge),
    )
    assert row is not None
    experiment_id: int = row["id"]
    await conn.execute("scoring_round_first", experiment_id=experiment_id, created_by=created_by)
    await conn.execute(
        "runs_insert",
        experiment_id=experiment_id,
        agent_id=agent_id,
        version_ids=[p.version_id for p in pins],
        target_version_ids=[p.target_version_id for p in pins],
        case_ids=[p.case_id for p in pins],
        repetitions=body.repetitions,
    )
    return experiment_id


def _judge_columns(judge: wire.ExperimentJudgeCreate | None) -> dict[str, Any]:
    """The SDK's judge of a new experiment, as its judge columns (all null: none)."""
    if judge is None:
        return dict.fromkeys(
            ("judge_by", "judge", "judge_model", "judge_base_url", "judge_prompt_hash")
        )
    name = f"{judge.provider}/{judge.model}" if judge.provider else f"sdk:{judge.model}"
    return {
        "judge_by": "sdk",
        "judge": name,
        "judge_model": judge.model,
        "judge_base_url": judge.base_url,
        "judge_prompt_hash": judge.prompt_hash,
    }


async def judged_by_sdk(conn: Conn, experiment_id: int) -> bool:
    """The SDK's process grades this experiment's rubrics, so the server's scoring does not."""
    row = await conn.one("experiment_judge_get", experiment_id=experiment_id)
    return row is not None and row["judge_by"] == "sdk"


async def record_server_judge(
    conn: Conn,
    experiment_id: int,
    *,
    provider: str,
    model: str,
    base_url: str,
    prompt_hash: str | None,
) -> None:
    """The server's judge graded a rubric of the experiment: record which one."""
    await conn.execute(
        "experiment_judge_record",
        experiment_id=experiment_id,
        judge=f"{provider}/{model}",
        judge_model=model,
        judge_base_url=base_url,
        judge_prompt_hash=prompt_hash,
    )


def _judge_of(row: dict[str, Any]) -> wire.ExperimentJudge | None:
    if row["judge_by"] is None:
        return None
    return wire.ExperimentJudge(
        name=row["judge"],
        by=row["judge_by"],
        model=row["judge_model"],
        base_url=row["judge_base_url"],
        prompt_hash=row["judge_prompt_hash"],
    )


# --------------------------------------------------------------------------- reading


def experiment_fields(
    row: dict[str, Any], by_state: dict[str, int], *, created_by: str | None
) -> dict[str, Any]:
    """The fields every view of an experiment shares (``Experiment``, ``ExperimentBrief``),
    from a row of any experiment query."""
    return dict(
        id=row["id"],
        workspace=row["workspace"],
        dataset=f"{row['dataset']}@{row['dataset_workspace']}",
        agent=f"{row['agent']}@{row['agent_workspace']}",
        driver=row["driver"],
        status=row["status"],
        repetitions=row["repetitions"],
        model=row["model"],
        split=row["split"],
        created_at=row["created_at"],
        created_by=created_by,
        finished_at=row["finished_at"],
        runs=sum(by_state.values()),
        by_state=by_state,
    )


class ExperimentRow(msgspec.Struct, frozen=True, kw_only=True):
    """What the routes check about an experiment before acting on it."""

    id: int
    workspace: str
    status: str
    driver: wire.Driver
    agent_id: int
    trajectory_source: str
    created_by: int | None
    created_by_name: str | None
    capabilities: dict[str, Any] | None

    @property
    def facts(self) -> wire.ExperimentFacts:
        return wire.ExperimentFacts(
            experiment_id=self.id,
            agent_id=self.agent_id,
            driver=self.driver,
            trajectory_source=self.trajectory_source,
        )


async def _experiment_get(conn: Conn, experiment_id: int) -> dict[str, Any]:
    row = await conn.one("experiment_get", experiment_id=experiment_id)
    if row is None:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    return row


async def experiment_row(conn: Conn, experiment_id: int) -> ExperimentRow:
    row = await _experiment_get(conn, experiment_id)
    return ExperimentRow(**{name: row[name] for name in ExperimentRow.__struct_fields__})


async def get_experiment(conn: Conn, experiment_id: int, *, with_runs: bool = False) -> Any:
    row = await _experiment_get(conn, experiment_id)
    counts = await conn.all("experiment_state_counts", experiment_id=experiment_id)
    by_state = {c["state"]: c["n"] for c in counts}
    fields = dict(
        **experiment_fields(row, by_state, created_by=row["created_by_name"]),
        case_ids=row["case_ids"],
        capabilities=msgspec.convert(row["capabilities"], Capabilities)
        if row["capabilities"]
        else None,
        summary=row["summary"],
        judge=_judge_of(row),
    )
    if not with_runs:
        return wire.Experiment(**fields)
    rows = await conn.all("experiment_runs", experiment_id=experiment_id)
    return wire.ExperimentDetail(**fields, run_list=[wire.RunRow(**r) for r in rows])


async def list_experiments(
    conn: Conn, workspace_id: int | None, limit: int
) -> list[wire.Experiment]:
    rows = await conn.all("experiment_list", workspace_id=workspace_id, limit=limit)
    return [
        wire.Experiment(
            **experiment_fields(r, r["by_state"], created_by=r["created_by_name"]),
            case_ids=r["case_ids"],
            summary=r["summary"],
            judge=_judge_of(r),
        )
        for r in rows
    ]


async def run_row(conn: Conn, run_id: int) -> dict[str, Any]:
    row = await conn.one("run_get", run_id=run_id)
    if row is None:
        raise NotFound(f"no run {run_id}; see `evalkit experiments show ID`", code="no-such-run")
    return row


def run_view(
    row: dict[str, Any], *, with_trajectory: bool, events: list[wire.RunEvent] | None = None
) -> wire.Run:
    body = row["trajectory"]
    summary = None
    if body is not None and row["trajectory_valid"]:
        try:
            summary = msgspec.to_builtins(summarize(msgspec.convert(body, Trajectory)))
        except (msgspec.ValidationError, ValueError):
            summary = None
    return wire.Run(
        id=row["id"],
        experiment_id=row["experiment_id"],
        case_id=row["case_id"],
        case_version=row["case_version"],
        repetition=row["repetition"],
        state=row["state"],
        harness_run_id=row["harness_run_id"],
        harness_status=row["harness_status"],
        session_id=row["session_id"],
        answer=row["answer"],
        output=row["output"],
        error=row["error"],
        timed_out=row["timed_out"],
        attempts=row["attempts"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        deadline_at=row["deadline_at"],
        stop_requested_at=row["stop_requested_at"],
        harness_done_at=row["harness_done_at"],
        finished_at=row["finished_at"],
        trajectory_source=row["trajectory_source"],
        trajectory_valid=row["trajectory_valid"],
        trajectory_partial=row["trajectory_partial"],
        trajectory_errors=[wire.TrajectoryError(**e) for e in row["trajectory_errors"] or []],
        trajectory_summary=summary,
        trajectory=body if with_trajectory else None,
        events=events or [],
    )


# --------------------------------------------------------------------------- the machine


async def load_work(conn: Conn, run_ids: list[int]) -> list[wire.LoadedRun]:
    """Each run as the state machine sees it, with its experiment and agent's harness."""
    rows = await conn.all("run_work", run_ids=run_ids)
    return [
        wire.LoadedRun(
            work=work_from_row(row),
            facts=wire.ExperimentFacts(
                experiment_id=row["experiment_id"],
                agent_id=row["agent_id"],
                driver=row["driver"],
                trajectory_source=row["trajectory_source"],
            ),
            harness_url=row["harness_url"],
            api_key=row["api_key"],
            capabilities=row["capabilities"],
        )
        for row in rows
    ]


def work_from_row(row: dict[str, Any]) -> wire.RunWork:
    content = row["content"]
    fixtures = dict(row["fixtures"] or {})
    if row["target_content"] is not None:
        content = apply_overlay(row["target_content"], content)
        fixtures = {**(row["target_fixtures"] or {}), **fixtures}
    case_input = dict(content.get("input") or {})
    keys = [str(k) for k in case_input.pop("files", None) or []]
    files = [
        InputFile(
            name=key,
            sha256=fixtures[key]["sha256"],
            size=fixtures[key]["size"],
            context=fixtures[key].get("context"),
        )
        for key in keys
        if key in fixtures
    ]
    return wire.RunWork(
        run_id=row["run_id"],
        experiment_id=row["experiment_id"],
        state=row["state"],
        attempts=row["attempts"],
        case_id=row["case_id"],
        repetition=row["repetition"],
        input=case_input,
        files=files,
        tags=list(content.get("tags") or []),
        split=content.get("split"),
        model=row["model"],
        trajectory_source=row["trajectory_source"],
        settings=wire.RunSettings(
            run_timeout=row["run_timeout_seconds"],
            poll_interval=row["poll_interval_seconds"],
            stop_grace=row["stop_grace_seconds"],
            trajectory_wait=row["trajectory_wait_seconds"],
        ),
        harness_run_id=row["harness_run_id"],
        harness_status=row["harness_status"],
        session_id=row["session_id"],
        timed_out=row["timed_out"],
        started_at=row["started_at"],
        deadline_at=row["deadline_at"],
        stop_requested_at=row["stop_requested_at"],
    )


def sign_files(work: wire.RunWork, public_url: str, key: str) -> wire.RunWork:
    """``work`` with a signed download URL on each input file, valid for the run's whole
    timeout and an hour more (for harnesses that accept file URLs)."""
    if not work.files:
        return work
    ttl = int(work.settings.run_timeout) + 3600
    files = [
        msgspec.structs.replace(f, url=sign_fixture_url(public_url, f.sha256, key, ttl))
        for f in work.files
    ]
    return msgspec.structs.replace(work, files=files)


NO_TRAJECTORY = dict.fromkeys(("source", "body", "raw", "partial", "valid", "errors"))


async def write_chains(
    conn: Conn, chains: Sequence[Sequence[wire.Transition]], *, actor: str
) -> list[bool]:
    """Record each chain (one step, or consecutive steps of one run) if its run is still
    where the chain's first step starts from, in order, in one round trip; for each, True
    when it was applied (all its steps: the row is updated once, to where the last step
    leads, and each step is logged). Only :mod:`evalkit.runs.engine` calls this, with
    chains it checked.

    The trajectory (if a step carries one) is validated here, on the server, whoever
    collected it, and is written by the same statement as the state change and its events."""
    rows = await conn.each("run_transition", [_chain_params(chain, actor) for chain in chains])
    return [row is not None for row in rows]


def _chain_params(steps: Sequence[wire.Transition], actor: str) -> dict[str, Any]:
    first, last = steps[0], steps[-1]
    carried = [t.trajectory for t in steps if t.trajectory is not None]
    if len(carried) > 1:
        raise ValueError(f"run {first.run_id}: a chain of steps carries one trajectory at most")
    trajectory = _checked(carried[0]) if carried else NO_TRAJECTORY
    return {
        "actor": actor,
        "run_id": first.run_id,
        "from_state": first.from_state,
        "from_attempts": first.from_attempts,
        "to_state": last.to_state,
        "attempts": last.attempts,
        "step_from": [t.from_state for t in steps],
        "step_to": [t.to_state for t in steps],
        "step_attempts": [t.attempts for t in steps],
        "step_why": [t.note or t.error for t in steps],
        **_merged_fields(steps),
        **trajectory,
    }


def _merged_fields(steps: Sequence[wire.Transition]) -> dict[str, Any]:
    """What the steps learned, as the statement applies it: what a later step says replaces
    what an earlier one said (the run's current value when none says anything), the times
    are kept from the first that gives one (the run's own first), and a run timed out once
    stays timed out. One step's fields are its own."""

    def latest(name: str) -> Any:
        return next((v for t in reversed(steps) if (v := getattr(t, name)) is not None), None)

    def earliest(name: str) -> Any:
        return next((v for t in steps if (v := getattr(t, name)) is not None), None)

    return {
        **{name: latest(name) for name in _LATEST_WINS},
        **{name: earliest(name) for name in _FIRST_WINS},
        "output": _dumps(latest("output")),
        "timed_out": any(t.timed_out for t in steps),
    }


_LATEST_WINS = ("harness_run_id", "harness_status", "session_id", "answer", "error")
_FIRST_WINS = ("started_at", "deadline_at", "stop_requested_at", "harness_done_at")


def _checked(record: wire.TrajectoryRecord) -> dict[str, Any]:
    """Validate a collected trajectory; keep the raw text when it is not JSON.

    The text is validated a step at a time (``validate_json``) and stored as it came (bytes
    from the harness client, a str from a client), so no decoded copy of it is held."""
    base = {"source": record.source, "partial": record.partial}
    data = record.received if record.received is not None else record.raw
    if data is None:
        error = {
            "path": "",
            "rule": "not-collected",
            "message": record.fetch_error or "no trajectory was collected",
        }
        return {**base, "body": None, "raw": None, "valid": False, "errors": _dumps([error])}
    try:
        errors = validate_json(data)
    except UnicodeDecodeError:
        # Bytes that are not UTF-8 are kept as their text, U+FFFD in place of the bad bytes.
        assert isinstance(data, bytes)
        text = data.decode("utf-8", "replace")
        return _checked(msgspec.structs.replace(record, raw=text, received=None))
    except (msgspec.DecodeError, RecursionError) as exc:
        error = {"path": "", "rule": "json-invalid", "message": f"not valid JSON ({exc})"}
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        return {**base, "body": None, "raw": text, "valid": False, "errors": _dumps([error])}
    return {
        **base,
        "body": JsonBytes(data) if isinstance(data, bytes) else data,
        "raw": None,
        "valid": not errors,
        "errors": _dumps([{"path": e.path, "rule": e.rule, "message": e.message} for e in errors]),
    }


async def run_position(conn: Conn, run_id: int) -> wire.RunPosition | None:
    row = await conn.one("run_position", run_id=run_id)
    return None if row is None else wire.RunPosition(**row)


async def find_run(conn: Conn, run_id: int) -> wire.RunPosition:
    """Where the run is; NotFound when there is no such run."""
    position = await run_position(conn, run_id)
    if position is None:
        raise NotFound(f"no run {run_id}; see `evalkit experiments show ID`", code="no-such-run")
    return position


async def run_events(conn: Conn, run_id: int) -> list[wire.RunEvent]:
    return [wire.RunEvent(**row) for row in await conn.all("run_events_list", run_id=run_id)]


async def finish_experiment_if_done(conn: Conn, experiment_id: int) -> bool:
    return await conn.one("experiment_finish_if_done", experiment_id=experiment_id) is not None


async def collecting_run_for_session(
    conn: Conn, agent_id: int, session_id: str
) -> wire.CollectingRun | None:
    """The agent's run waiting in collecting for this traced session, if any."""
    row = await conn.one("run_collecting_for_session", agent_id=agent_id, session_id=session_id)
    return None if row is None else wire.CollectingRun(**row)


async def link_session(conn: Conn, agent_id: int, session_id: str, run_id: int) -> None:
    await conn.execute("session_link_run", run_id=run_id, agent_id=agent_id, session_id=session_id)


async def agents_with_queued_runs(conn: Conn) -> list[int]:
    return [row["agent_id"] for row in await conn.all("agents_with_queued_runs")]


async def open_experiments_without_live_runs(conn: Conn) -> list[int]:
    return [row["id"] for row in await conn.all("experiments_without_live_runs")]


async def orphaned_runs(conn: Conn, idle_seconds: float) -> list[dict[str, Any]]:
    """Live server-driven runs idle that long, each with the queueing locks of the jobs that
    would move it (the caller drops those a job still holds:
    ``evalkit.jobs.procrastinate_adapter.without_live_jobs``)."""
    return await conn.all("runs_orphaned", idle_seconds=idle_seconds)


async def reopen_experiment(conn: Conn, experiment_id: int) -> None:
    await conn.execute("experiment_reopen", experiment_id=experiment_id)


async def claim_runs(conn: Conn, agent_id: int, limit: int, *, actor: str) -> list[int]:
    """Move up to ``limit`` queued server-driven runs of the agent to starting, within the
    agent's free slots. A lock of the agent row, taken inside the claim's statement, makes
    concurrent claims count each other."""
    rows = await conn.all("runs_claim", agent_id=agent_id, limit=limit, actor=actor)
    return [row["id"] for row in rows]


async def live_runs(conn: Conn, experiment_id: int) -> list[dict[str, Any]]:
    return await conn.all("run_live_ids", experiment_id=experiment_id)
