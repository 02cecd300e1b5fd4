"""Wire objects of ``evalkit harness check``: one row per capability, and the request."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from evalkit.model.api import Input, Output

CheckResult = Literal["pass", "fail", "skipped"]

DEFAULT_CHECK_TIMEOUT = 60.0
MAX_CHECK_TIMEOUT = 600.0


class CheckRow(Output):
    capability: str
    """``capabilities``, ``run``, ``idempotent start``, or an ``accepts.*`` / ``provides.*``
    name of the Harness API."""
    result: CheckResult
    """``skipped``: not declared, or the check's run gave nothing to verify it with."""
    detail: str = ""


class CheckReport(Output):
    agent: str | None
    harness_url: str
    ok: bool
    """No row failed."""
    rows: list[CheckRow]


class HarnessCheckRequest(Input):
    timeout: Annotated[float, Meta(gt=0, le=MAX_CHECK_TIMEOUT)] = DEFAULT_CHECK_TIMEOUT
    """Seconds each run of the check may take to reach a final status."""
