"""Wire objects for experiments, runs, the run state machine's steps and trajectories."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

import msgspec

from evalkit.model.api import Input, Output
from evalkit.model.harness import Capabilities, InputFile

RunState = Literal[
    "queued",
    "starting",
    "running",
    "stopping",
    "collecting",
    "scoring",
    "done",
    "failed",
    "errored",
]
RUN_STATES: tuple[str, ...] = get_args(RunState)
"""Every run state, in the order a run goes through them."""
TERMINAL: frozenset[str] = frozenset({"done", "failed", "errored"})
"""A run in one of these states is over: nothing moves it again."""
IN_FLIGHT: frozenset[str] = frozenset({"starting", "running", "stopping"})
"""States that hold one of the agent's ``max_concurrent_runs`` slots."""
Driver = Literal["server", "cli", "sdk"]


def agent_failed(harness_status: str | None, timed_out: bool) -> bool:
    """The run ends ``failed``, not ``done``: the agent failed it (its harness reported it
    failed, or the SDK's task raised), or the harness stopped it before it finished and
    evalkit had not asked. Such a run has no answer to judge (docs/scoring.md). The state
    machine ends a run by this rule, and scoring skips the run's evaluators by it."""
    return harness_status == "failed" or (harness_status == "stopped" and not timed_out)


class ExperimentJudgeCreate(Input, kw_only=True):
    """The judge the SDK's process grades an experiment's rubrics with; the server's
    scoring then leaves them to it."""

    provider: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    """The server's LLM provider, when it is the default judge; None for a Judge given to
    run_experiment."""
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    base_url: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    prompt_hash: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class ExperimentCreate(Input, kw_only=True):
    dataset: str
    """``name@workspace`` (a bare name is the caller's personal workspace)."""
    agent: str
    case_ids: list[str] | None = None
    split: str | None = None
    repetitions: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    model: str | None = None
    capabilities: Capabilities | None = None
    """Required when the caller's CLI drives the runs (a personal harness agent): the
    capabilities it fetched from the harness. The server fetches them itself otherwise."""
    sdk: bool = False
    """Set by the SDK: the caller's code runs a code-driven agent and reports each run."""
    judge: ExperimentJudgeCreate | None = None
    """Set by the SDK when its process grades the rubrics (only with ``sdk``)."""


class ExperimentJudge(Output, kw_only=True):
    """Which judge grades an experiment's rubrics."""

    name: str
    """``provider/model`` (an LLM provider of the server) or ``sdk:model`` (a Judge given
    to run_experiment)."""
    by: Literal["server", "sdk"]
    """Who calls it: the server's scoring, or the SDK's process (with its own key)."""
    model: str | None = None
    base_url: str | None = None
    prompt_hash: str | None = None


class Experiment(Output, kw_only=True):
    id: int
    workspace: str
    dataset: str
    """``name@workspace``."""
    agent: str
    """``name@workspace``."""
    driver: Driver
    status: Literal["running", "finished"]
    repetitions: int
    model: str | None
    split: str | None
    case_ids: list[str] | None
    created_at: datetime
    created_by: str | None
    finished_at: datetime | None
    runs: int
    by_state: dict[str, int]
    capabilities: Capabilities | None = None
    summary: dict[str, Any] | None = None
    judge: ExperimentJudge | None = None
    """None while no judge has graded a rubric of it."""


class RunRow(Output, kw_only=True):
    id: int
    case_id: str
    repetition: int
    state: RunState
    harness_run_id: str | None
    harness_status: str | None
    error: str | None
    timed_out: bool
    attempts: int
    created_at: datetime
    started_at: datetime | None
    harness_done_at: datetime | None
    finished_at: datetime | None
    trajectory_valid: bool | None
    trajectory_partial: bool | None


class ExperimentDetail(Experiment, kw_only=True):
    run_list: list[RunRow] = msgspec.field(default_factory=list)


class TrajectoryError(Output, kw_only=True):
    path: str
    rule: str
    message: str


class RunEvent(Output, kw_only=True):
    """One recorded transition of a run."""

    at: datetime
    actor: str
    """Who took the step: ``worker`` (the server's jobs), ``sweep`` (its safety net),
    ``server`` (the end of an SDK run the edge scored in place), ``cli:<user>`` or
    ``sdk:<user>`` (a driver posting steps)."""
    from_state: RunState
    to_state: RunState
    attempts: int
    why: str | None = None


class Run(Output, kw_only=True):
    id: int
    experiment_id: int
    case_id: str
    case_version: int
    repetition: int
    state: RunState
    harness_run_id: str | None
    harness_status: str | None
    session_id: str | None
    answer: str | None
    output: Any
    error: str | None
    timed_out: bool
    attempts: int
    created_at: datetime
    started_at: datetime | None
    deadline_at: datetime | None
    stop_requested_at: datetime | None
    harness_done_at: datetime | None
    finished_at: datetime | None
    trajectory_source: str | None
    trajectory_valid: bool | None
    trajectory_partial: bool | None
    trajectory_errors: list[TrajectoryError] = msgspec.field(default_factory=list)
    trajectory_summary: dict[str, Any] | None = None
    trajectory: Any = None
    events: list[RunEvent] = msgspec.field(default_factory=list)
    """The run's transitions, oldest first."""


# --------------------------------------------------------------------------- the machine


class RunSettings(msgspec.Struct, kw_only=True):
    run_timeout: float
    poll_interval: float
    stop_grace: float
    trajectory_wait: float


class RunPosition(msgspec.Struct, frozen=True, kw_only=True):
    """Where a run is, and nothing else: what a step is built from when the rest of the
    run does not matter (giving up on it)."""

    run_id: int
    experiment_id: int
    state: RunState
    attempts: int
    session_id: str | None = None


class ExperimentFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the work after a recorded step needs to know about the run's experiment (all
    runs of an experiment share its agent)."""

    experiment_id: int
    agent_id: int
    driver: Driver
    trajectory_source: str


class CollectingRun(msgspec.Struct, frozen=True, kw_only=True):
    """A traced run waiting in collecting for its session's spans (what settle reads)."""

    run_id: int
    experiment_id: int
    agent_id: int
    state: RunState
    attempts: int
    timed_out: bool
    harness_status: str | None
    harness_done_at: datetime | None
    driver: Driver
    agent_name: str
    trajectory_source: str
    trajectory_wait_seconds: float

    @property
    def facts(self) -> ExperimentFacts:
        return ExperimentFacts(
            experiment_id=self.experiment_id,
            agent_id=self.agent_id,
            driver=self.driver,
            trajectory_source=self.trajectory_source,
        )


class RunWork(msgspec.Struct, kw_only=True):
    """One run as the state machine sees it: where it is and what it needs to go on."""

    run_id: int
    experiment_id: int
    state: RunState
    attempts: int = 0
    case_id: str
    repetition: int
    input: dict[str, Any]
    """The case's effective ``input`` (overlay applied), without ``files``."""
    files: list[InputFile] = []
    """Pins of the input files; ``url`` is set when the server signed one."""
    tags: list[str] = []
    split: str | None = None
    model: str | None = None
    trajectory_source: Literal["harness", "otel"] = "harness"
    settings: RunSettings
    harness_run_id: str | None = None
    harness_status: str | None = None
    session_id: str | None = None
    timed_out: bool = False
    started_at: datetime | None = None
    deadline_at: datetime | None = None
    stop_requested_at: datetime | None = None


class LoadedRun(msgspec.Struct, frozen=True, kw_only=True):
    """A run as the server's job drives it: the machine's view, its experiment, and how to
    reach its agent's harness."""

    work: RunWork
    facts: ExperimentFacts
    harness_url: str | None
    api_key: str | None
    """The harness key, encrypted (``evalkit.jobs.runtime.agent_key`` decrypts it)."""
    capabilities: dict[str, Any] | None


class TrajectoryRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A trajectory as collected: the raw text (kept even when it is not valid ATIF)."""

    source: Literal["harness", "otel", "sdk"]
    raw: str | None = None
    partial: bool = False
    fetch_error: str | None = None
    received: bytes | None = None
    """The trajectory as the bytes the harness client read, in place of ``raw``. Kept as
    bytes to the database: as a Python str, the text of a large trajectory takes 2 or 4
    bytes a character once one character needs them. Clients post ``raw`` instead
    (``runs.local.as_posted``)."""


class Transition(Input, kw_only=True, omit_defaults=True):
    """One step of a run: from (state, attempts) to a state, with what was learned.

    Applied by compare-and-set, so replaying a step changes nothing."""

    run_id: int
    from_state: RunState
    from_attempts: int = 0
    to_state: RunState
    attempts: int = 0
    harness_run_id: str | None = None
    harness_status: str | None = None
    session_id: str | None = None
    answer: str | None = None
    output: Any = None
    error: str | None = None
    timed_out: bool = False
    started_at: datetime | None = None
    deadline_at: datetime | None = None
    stop_requested_at: datetime | None = None
    harness_done_at: datetime | None = None
    trajectory: TrajectoryRecord | None = None
    note: Annotated[str, msgspec.Meta(max_length=2000)] | None = None
    """Why the step was taken, when its error does not say (kept in the run's event log)."""


class TransitionResult(Output, kw_only=True):
    applied: bool
    """False when the run had already moved on (the step was a replay)."""
    state: RunState


class WorkList(Output, kw_only=True):
    experiment_id: int
    runs: list[RunWork]
