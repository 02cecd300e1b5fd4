"""Wire objects for agents: create, edit, the answer every agent route gives, delete.

An agent's API key goes in (``api_key``) and never comes out: answers say ``has_api_key``
and the name of the variable it came from (``api_key_env``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from evalkit.model.api import Input, Output

TrajectorySource = Literal["harness", "otel"]
AgentKind = Literal["harness", "code"]

# The run settings: (field, default, rule), mirroring the CHECK constraints of ``agents``.
DEFAULT_MAX_CONCURRENT_RUNS = 4
DEFAULT_RUN_TIMEOUT = 600.0
DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_STOP_GRACE = 30.0
DEFAULT_TRAJECTORY_WAIT = 60.0
MAX_CONCURRENT_RUNS_LIMIT = 1000


class AgentCreate(Input):
    name: str
    harness_url: str | None = None
    """The harness's base URL; none makes a code-driven agent (the SDK reports its runs)."""
    api_key: str | None = None
    """Sent to the harness as ``Authorization: Bearer``; stored encrypted, never returned."""
    api_key_env: str | None = None
    """The environment variable the key came from, kept so the CLI can read it again."""
    trajectory_source: TrajectorySource | None = None
    """Default: ``harness`` with a harness URL, ``otel`` without."""
    mapping: dict[str, Any] | None = None
    """A span mapping (JSON object); required when trajectory_source is otel."""
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    run_timeout: float = DEFAULT_RUN_TIMEOUT
    """Seconds before a run is stopped."""
    poll_interval: float = DEFAULT_POLL_INTERVAL
    """Seconds between status polls."""
    stop_grace: float = DEFAULT_STOP_GRACE
    """Seconds a stopped run has to reach a final status."""
    trajectory_wait: float = DEFAULT_TRAJECTORY_WAIT
    """Seconds to wait for a traced run's spans to settle."""
    provides: dict[str, bool] = msgspec.field(default_factory=dict)
    """What the agent gives back (keys of the Harness API ``provides``)."""


class AgentEdit(Input):
    """Every field optional: an absent field keeps its value. ``harness_url: null`` makes the
    agent code-driven; ``api_key: null`` removes the stored key. ``provides`` keys are merged
    into the stored ones. A new ``mapping`` becomes the next active version."""

    harness_url: str | UnsetType | None = UNSET
    api_key: str | UnsetType | None = UNSET
    api_key_env: str | UnsetType | None = UNSET
    trajectory_source: TrajectorySource | UnsetType = UNSET
    mapping: dict[str, Any] | UnsetType = UNSET
    max_concurrent_runs: int | UnsetType = UNSET
    run_timeout: float | UnsetType = UNSET
    poll_interval: float | UnsetType = UNSET
    stop_grace: float | UnsetType = UNSET
    trajectory_wait: float | UnsetType = UNSET
    provides: dict[str, bool] | UnsetType = UNSET


class Agent(Output):
    workspace: str
    name: str
    kind: AgentKind
    """``harness``: evalkit calls its harness URL; ``code``: the SDK reports its runs."""
    harness_url: str | None
    has_api_key: bool
    api_key_env: str | None
    trajectory_source: TrajectorySource
    max_concurrent_runs: int
    run_timeout: float
    poll_interval: float
    stop_grace: float
    trajectory_wait: float
    provides: dict[str, bool]
    mapping_version: int | None
    """The active span mapping's version, if any."""
    created_at: datetime
    created_by: str | None
    updated_at: datetime


class AgentEdited(Output):
    agent: Agent
    api_key_cleared: bool = False
    """The harness URL changed without a new key, so the stored key was removed."""
    mapping_retired: int | None = None
    """The mapping version this edit replaced."""


class AgentDeleted(Output):
    workspace: str
    name: str
    experiments_deleted: int
