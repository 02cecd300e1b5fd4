"""Harness API v1: what evalkit sends to an agent's harness and what it accepts back.

evalkit is the client. The harness lives at a base URL (``agents create --harness-url``)
and answers, relative to it::

    GET  /capabilities            -> Capabilities
    POST /runs                    RunStart -> RunStatus (200 or 201)
    GET  /runs/{id}               -> RunStatus
    POST /runs/{id}/stop          -> RunStatus (200 or 202)
    GET  /runs/{id}/trajectory    -> an ATIF trajectory (see evalkit.atif)
    GET  /runs                    -> RunListing            (provides.run_listing)
    GET  /runs/{id}/workspace     -> WorkspaceListing      (provides.workspace)
    GET  /runs/{id}/workspace/{path} -> the file's bytes   (provides.workspace)

Every request carries ``Authorization: Bearer <key>`` when the agent has a key.
Responses are decoded leniently about extra fields (a harness may say more than we read)
and strictly about the fields we do read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

API_VERSION = "1"

RunStatusValue = Literal["queued", "running", "succeeded", "failed", "stopped"]
"""``queued`` and ``running`` are live; ``succeeded``, ``failed`` and ``stopped`` are final."""
FINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})

ACCEPTS = ("stop", "files", "file_urls")
PROVIDES = (
    "trajectory",
    "tool_calls",
    "thinking",
    "token_usage",
    "artifacts",
    "workspace",
    "run_listing",
)


class _Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    """msgspec does not inherit ``kw_only``: a subclass with a required field after an
    optional one says ``kw_only=True`` again."""


class Accepts(_Wire):
    """What the harness accepts from evalkit."""

    stop: bool = False
    """POST /runs/{id}/stop works: evalkit stops runs that pass the agent's run timeout."""
    files: bool = False
    """Input files may be sent inline (base64) in RunStart.files."""
    file_urls: bool = False
    """Input files may be sent as URLs the harness downloads (no credentials needed)."""


class Provides(_Wire):
    """What the harness gives back. Declare only what works: evaluators that need an
    input the harness does not provide are skipped as neutral, not failed."""

    trajectory: bool = False
    tool_calls: bool = False
    thinking: bool = False
    token_usage: bool = False
    artifacts: bool = False
    workspace: bool = False
    run_listing: bool = False


class Capabilities(_Wire):
    api_version: str = API_VERSION
    name: str | None = None
    version: str | None = None
    accepts: Accepts = msgspec.field(default_factory=Accepts)
    provides: Provides = msgspec.field(default_factory=Provides)


class InputFile(_Wire):
    """One input file. Exactly one of ``content_base64`` and ``url`` is set."""

    name: str
    """The fixture key the case names under ``input.files``."""
    sha256: str
    size: int
    context: str | None = None
    content_base64: str | None = None
    url: str | None = None


class RunMetadata(_Wire, kw_only=True):
    experiment_id: int | None = None
    case_id: str
    repetition: Annotated[int, Meta(ge=1)] = 1
    tags: list[str] = []
    split: str | None = None


class RunStart(_Wire, kw_only=True):
    """POST /runs. ``evalkit_run_id`` is an idempotency key: a harness that receives the
    same value twice must answer with the run it already started, not start another."""

    evalkit_run_id: str
    input: dict[str, Any]
    """The case's ``input`` mapping, without ``files``."""
    files: list[InputFile] = []
    model: str | None = None
    metadata: RunMetadata


class RunStatus(_Wire):
    """GET /runs/{id}. ``answer`` is the final text, ``output`` any structured result."""

    id: str
    status: RunStatusValue
    answer: str | None = None
    output: Any = None
    error: str | None = None
    session_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


class RunListing(_Wire):
    runs: list[RunStatus]
    next_cursor: str | None = None


class WorkspaceFile(_Wire):
    path: str
    size: int | None = None


class WorkspaceListing(_Wire):
    files: list[WorkspaceFile]
