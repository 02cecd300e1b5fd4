"""Wire objects for schedules: experiments the server starts on a cron timer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from evalkit.model.api import Input, Output


class ScheduleCreate(Input, kw_only=True):
    dataset: str
    """``name@workspace`` (a bare name is the caller's personal workspace)."""
    agent: str
    """``name@workspace`` of a shared agent with a harness URL."""
    cron: str
    """Five fields (minute hour day-of-month month day-of-week), evaluated in UTC."""
    name: str | None = None
    """Unique in the schedule's workspace; default ``DATASET-AGENT``."""
    case_ids: list[str] | None = None
    split: str | None = None
    repetitions: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    model: str | None = None


class ScheduleLatest(Output, kw_only=True):
    """The experiment a schedule started last, as a glance at its result."""

    experiment_id: int
    status: Literal["running", "finished"]
    created_at: datetime
    finished_at: datetime | None
    runs: int
    by_state: dict[str, int]
    """Runs per state now (``done``, ``failed``, ``errored``, and live states while running)."""
    summary: dict[str, Any] | None = None
    """The experiment's summary once it has finished (see ``GET /api/experiments/{id}``)."""


class Schedule(Output, kw_only=True):
    id: int
    name: str
    workspace: str
    """Where its experiments live (the dataset's workspace when dataset and agent are shared)."""
    dataset: str
    """``name@workspace``."""
    agent: str
    """``name@workspace``."""
    cron: str
    split: str | None
    case_ids: list[str] | None
    repetitions: int
    model: str | None
    created_at: datetime
    created_by: str | None
    """The user each experiment is started as."""
    next_fire_at: datetime
    last_fire_at: datetime | None
    fires: int
    """How many slots it has fired on (started or refused)."""
    last_error: str | None
    """Why its last fire started no experiment; null when it started one (or never fired)."""
    latest: ScheduleLatest | None


class ScheduleDeleted(Output, kw_only=True):
    id: int
    name: str
    workspace: str
