"""Wire objects for remote evaluators (Custom Evaluator API endpoints) of a workspace.

The evaluator's API key goes in (``api_key``) and never comes out: answers say
``has_api_key`` and the name of the variable it came from (``api_key_env``). What evalkit
sends to the endpoint and reads back is :mod:`evalkit.model.evaluator_api`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from evalkit.model.api import Input, Output

EvaluatorKind = Literal["score", "gauge"]

DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 600.0


class EvaluatorCreate(Input):
    name: str
    """The name cases use under ``evaluators.custom``."""
    endpoint: str
    """The URL evalkit POSTs each run to."""
    kind: EvaluatorKind = "score"
    """``score``: counts towards pass/fail; ``gauge``: a measurement, only shown. A score
    in the evaluator's answer may say its own kind."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer``; stored encrypted, never returned."""
    api_key_env: str | None = None
    """The environment variable the key came from, kept for display."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds one call may take; a call that takes longer is recorded as an error."""


class Evaluator(Output):
    workspace: str
    name: str
    endpoint: str
    kind: EvaluatorKind
    has_api_key: bool
    api_key_env: str | None
    timeout: float
    created_at: datetime
    created_by: str | None


class EvaluatorDeleted(Output):
    workspace: str
    name: str
