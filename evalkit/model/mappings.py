"""Wire objects for span mapping versions: set (a new draft), activate, show."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from evalkit.model.api import Input, Output

MappingState = Literal["draft", "active", "retired"]


class MappingSet(Input):
    mapping: dict[str, Any]
    """The span mapping (see docs/tracing.md); checked with the mapping rules."""
    activate: bool = False
    """Make the new version active at once instead of leaving it a draft."""


class MappingVersion(Output):
    workspace: str
    agent: str
    version: int
    state: MappingState
    """``draft`` until activated; ``retired`` once another version was activated."""
    created_at: datetime
    created_by: str | None
    mapping: dict[str, Any]


class MappingActivated(Output):
    workspace: str
    agent: str
    version: int
    retired: int | None = None
    """The version that was active before, if another one was."""
    already_active: bool = False
