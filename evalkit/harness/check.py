"""``evalkit harness check``: hold a live harness to what its capabilities declare.

One trivial run (with one input file: by URL when the harness accepts file URLs, inline
when it only accepts inline files) polled to a final status, then every declared
capability exercised on it (trajectory fetched and validated as ATIF, the listing
searched for it, the workspace listed and read) and ``stop`` on a second run. Each
capability gets one row: ``pass``, ``fail`` with the reason, or ``skipped`` when it is not
declared (or the run gave nothing to verify it with).

The same function serves the server (shared agents, egress-checked client, the stored key,
the file by signed URL) and the CLI (personal agents, on the owner's machine).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec

from evalkit.atif import validate_trajectory
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.model.harness import (
    API_VERSION,
    FINAL_STATUSES,
    Capabilities,
    InputFile,
    RunMetadata,
    RunStart,
    RunStatus,
)
from evalkit.model.harness_check import CheckReport, CheckResult, CheckRow

CHECK_FILE_NAME = "evalkit-check.txt"
CHECK_FILE_BYTES = b"evalkit harness check: this file was attached to check input files.\n"
CHECK_FILE_SHA256 = hashlib.sha256(CHECK_FILE_BYTES).hexdigest()
QUESTION = "What is 2 + 3?"
MAX_LISTING_PAGES = 50
_JSON = msgspec.json.Decoder()


@dataclass
class _Report:
    rows: list[CheckRow] = field(default_factory=list)

    def add(self, capability: str, result: CheckResult, detail: str = "") -> None:
        self.rows.append(CheckRow(capability=capability, result=result, detail=detail))

    def skip_undeclared(self, capability: str) -> None:
        self.add(capability, "skipped", "not declared")


async def check_harness(
    client: HarnessClient,
    *,
    file_url: str | None = None,
    timeout: float = 60.0,
    agent: str | None = None,
) -> CheckReport:
    """Check the harness behind ``client``. ``file_url`` serves :data:`CHECK_FILE_BYTES`
    (a signed fixture URL) for harnesses that accept file URLs; ``timeout`` bounds each
    wait for a run to reach a final status."""
    report = _Report()
    try:
        caps = await client.capabilities()
    except HarnessError as exc:
        report.add("capabilities", "fail", exc.message)
        return _done(report, client, agent)
    if caps.api_version != API_VERSION:
        report.add(
            "capabilities",
            "fail",
            f"api_version is {caps.api_version!r}; this evalkit speaks {API_VERSION!r}",
        )
        return _done(report, client, agent)
    report.add("capabilities", "pass", _declared(caps))

    body, file_mode = _first_run(caps, file_url)
    status = await _run(report, client, body, timeout)
    _files_rows(report, caps, file_mode, status)
    if status is not None:
        await _idempotent(report, client, body, status)
        await _trajectory_rows(report, client, caps, status)
        await _listing_row(report, client, caps, status)
        await _workspace_row(report, client, caps, status)
    else:
        for name in ("trajectory", "tool_calls", "thinking", "token_usage"):
            _unreachable(report, caps, name)
        _unreachable(report, caps, "run_listing")
        _unreachable(report, caps, "workspace")
    report.add("provides.artifacts", "skipped", "Harness API v1 has no endpoint to check it")
    await _stop_row(report, client, caps, timeout)
    return _done(report, client, agent)


def _done(report: _Report, client: HarnessClient, agent: str | None) -> CheckReport:
    order = {name: n for n, name in enumerate(ROW_ORDER)}
    rows = sorted(report.rows, key=lambda r: order.get(r.capability, len(order)))
    return CheckReport(
        agent=agent,
        harness_url=client.base_url,
        ok=not any(r.result == "fail" for r in rows),
        rows=rows,
    )


ROW_ORDER = (
    "capabilities",
    "run",
    "idempotent start",
    "accepts.files",
    "accepts.file_urls",
    "accepts.stop",
    "provides.trajectory",
    "provides.tool_calls",
    "provides.thinking",
    "provides.token_usage",
    "provides.run_listing",
    "provides.workspace",
    "provides.artifacts",
)


def _declared(caps: Capabilities) -> str:
    accepts = [k for k, v in msgspec.structs.asdict(caps.accepts).items() if v]
    provides = [k for k, v in msgspec.structs.asdict(caps.provides).items() if v]
    who = " ".join(x for x in (caps.name, caps.version) if x) or "unnamed harness"
    return (
        f"{who}; accepts {', '.join(accepts) or 'nothing'}; "
        f"provides {', '.join(provides) or 'nothing'}"
    )


def _new_body(files: list[InputFile]) -> RunStart:
    return RunStart(
        evalkit_run_id=f"evalkit-check-{uuid.uuid4().hex}",
        input={"question": QUESTION},
        files=files,
        metadata=RunMetadata(case_id="evalkit-harness-check", tags=["evalkit-check"]),
    )


def _first_run(caps: Capabilities, file_url: str | None) -> tuple[RunStart, str | None]:
    """The trivial run's body, and how its file goes: ``url``, ``inline`` or None."""
    common = {"name": CHECK_FILE_NAME, "sha256": CHECK_FILE_SHA256, "size": len(CHECK_FILE_BYTES)}
    if caps.accepts.file_urls and file_url:
        return _new_body([InputFile(**common, url=file_url)]), "url"
    if caps.accepts.files:
        encoded = base64.b64encode(CHECK_FILE_BYTES).decode()
        return _new_body([InputFile(**common, content_base64=encoded)]), "inline"
    return _new_body([]), None


async def _run(
    report: _Report, client: HarnessClient, body: RunStart, timeout: float
) -> RunStatus | None:
    """Start the trivial run and poll it to a final status; the row says how it went."""
    began = time.monotonic()
    try:
        started = await client.start(body)
    except HarnessError as exc:
        report.add("run", "fail", f"start: {exc.message}")
        return None
    try:
        final = await _poll(client, started, timeout)
    except HarnessError as exc:
        report.add("run", "fail", f"polling {started.id}: {exc.message}")
        return None
    took = time.monotonic() - began
    if final.status not in FINAL_STATUSES:
        report.add(
            "run",
            "fail",
            f"run {final.id} still {final.status} after {timeout:g} s; raise --timeout if "
            "the agent is slow",
        )
        return final
    if final.status != "succeeded":
        why = f": {final.error}" if final.error else ""
        report.add("run", "fail", f"run {final.id} ended {final.status}{why}")
        return final
    answer = (final.answer or "").strip().replace("\n", " ")
    shown = answer if len(answer) <= 60 else answer[:57] + "..."
    report.add("run", "pass", f"run {final.id} succeeded in {took:.1f} s; answer {shown!r}")
    return final


async def _poll(client: HarnessClient, status: RunStatus, timeout: float) -> RunStatus:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while status.status not in FINAL_STATUSES and time.monotonic() < deadline:
        await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 1.0)
        status = await client.status(status.id)
    return status


def _files_rows(
    report: _Report, caps: Capabilities, mode: str | None, status: RunStatus | None
) -> None:
    ran = status is not None and status.status == "succeeded"
    for name, used in (("files", "inline"), ("file_urls", "url")):
        capability = f"accepts.{name}"
        if not getattr(caps.accepts, name):
            report.skip_undeclared(capability)
        elif mode == used:
            if ran:
                how = "by URL" if used == "url" else "inline"
                report.add(capability, "pass", f"the run succeeded with {CHECK_FILE_NAME} {how}")
            else:
                report.add(capability, "fail", f"the run with a file sent {used} did not succeed")
        elif name == "file_urls":
            report.add(capability, "skipped", "no file URL could be made for the check")
        else:
            report.add(capability, "skipped", "the check sent its one file by URL")


async def _idempotent(
    report: _Report, client: HarnessClient, body: RunStart, first: RunStatus
) -> None:
    try:
        again = await client.start(body)
    except HarnessError as exc:
        report.add("idempotent start", "fail", f"starting the same run again: {exc.message}")
        return
    if again.id != first.id:
        report.add(
            "idempotent start",
            "fail",
            f"the same evalkit_run_id started a second run ({again.id}, first {first.id}); "
            "answer with the existing run",
        )
        return
    report.add("idempotent start", "pass", "the same evalkit_run_id gave the same run")


def _unreachable(report: _Report, caps: Capabilities, name: str) -> None:
    if not getattr(caps.provides, name):
        report.skip_undeclared(f"provides.{name}")
    else:
        report.add(f"provides.{name}", "fail", "not checked: the run did not start")


async def _trajectory_rows(
    report: _Report, client: HarnessClient, caps: Capabilities, status: RunStatus
) -> None:
    p = caps.provides
    if not p.trajectory:
        report.skip_undeclared("provides.trajectory")
        for name in ("tool_calls", "thinking", "token_usage"):
            if getattr(p, name):
                report.add(
                    f"provides.{name}",
                    "skipped",
                    "the harness provides no trajectory (traces carry it?)",
                )
            else:
                report.skip_undeclared(f"provides.{name}")
        return
    doc: Any = None
    try:
        raw = await client.trajectory(status.id)
        doc = _JSON.decode(raw)
    except HarnessError as exc:
        report.add("provides.trajectory", "fail", exc.message)
    except msgspec.DecodeError:
        report.add("provides.trajectory", "fail", "the trajectory is not JSON")
    errors = validate_trajectory(doc) if doc is not None else None
    if errors:
        shown = "; ".join(f"{e.path or '(document)'}: [{e.rule}]" for e in errors[:3])
        more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
        report.add("provides.trajectory", "fail", f"not valid ATIF: {shown}{more}")
        doc = None
    elif errors is not None:
        report.add("provides.trajectory", "pass", f"valid ATIF, {len(doc['steps'])} steps")
    for name, found in _trajectory_facts(doc).items():
        capability = f"provides.{name}"
        if not getattr(p, name):
            report.skip_undeclared(capability)
        elif doc is None:
            report.add(capability, "fail", "no valid trajectory to look in")
        elif found:
            report.add(capability, "pass", found)
        elif name == "token_usage":
            report.add(capability, "fail", "the trajectory reports no token counts")
        else:
            report.add(capability, "skipped", f"declared; the check's run had no {name}")


def _trajectory_facts(doc: Any) -> dict[str, str]:
    """What the trajectory shows of each trajectory-borne capability ("" = nothing)."""
    calls = thinking = tokens = 0
    for step in doc["steps"] if doc is not None else ():
        calls += len(step.get("tool_calls") or ())
        thinking += bool(step.get("reasoning_content"))
        metrics = step.get("metrics") or {}
        tokens += (metrics.get("prompt_tokens") or 0) + (metrics.get("completion_tokens") or 0)
    final = (doc or {}).get("final_metrics") or {}
    total = (final.get("total_prompt_tokens") or 0) + (final.get("total_completion_tokens") or 0)
    tokens = total or tokens
    return {
        "tool_calls": f"{calls} tool call(s)" if calls else "",
        "thinking": f"reasoning on {thinking} step(s)" if thinking else "",
        "token_usage": f"{tokens} tokens" if tokens else "",
    }


async def _listing_row(
    report: _Report, client: HarnessClient, caps: Capabilities, status: RunStatus
) -> None:
    if not caps.provides.run_listing:
        report.skip_undeclared("provides.run_listing")
        return
    cursor: str | None = None
    seen = 0
    try:
        for page in range(1, MAX_LISTING_PAGES + 1):
            listing = await client.list_runs(cursor)
            seen += len(listing.runs)
            if any(r.id == status.id for r in listing.runs):
                report.add("provides.run_listing", "pass", f"run {status.id} listed (page {page})")
                return
            cursor = listing.next_cursor
            if not cursor:
                break
    except HarnessError as exc:
        report.add("provides.run_listing", "fail", exc.message)
        return
    report.add(
        "provides.run_listing", "fail", f"run {status.id} is not among the {seen} runs listed"
    )


async def _workspace_row(
    report: _Report, client: HarnessClient, caps: Capabilities, status: RunStatus
) -> None:
    if not caps.provides.workspace:
        report.skip_undeclared("provides.workspace")
        return
    try:
        listing = await client.workspace(status.id)
        if not listing.files:
            report.add("provides.workspace", "pass", "listed; the run left no files")
            return
        first = listing.files[0]
        content = await client.workspace_file(status.id, first.path)
    except HarnessError as exc:
        report.add("provides.workspace", "fail", exc.message)
        return
    if first.size is not None and first.size != len(content):
        report.add(
            "provides.workspace",
            "fail",
            f"{first.path} is listed with {first.size} bytes but {len(content)} came",
        )
        return
    report.add(
        "provides.workspace",
        "pass",
        f"{len(listing.files)} file(s); read {first.path} ({len(content)} bytes)",
    )


async def _stop_row(
    report: _Report, client: HarnessClient, caps: Capabilities, timeout: float
) -> None:
    if not caps.accepts.stop:
        report.skip_undeclared("accepts.stop")
        return
    try:
        started = await client.start(_new_body([]))
        answer = await client.stop(started.id)
        final = await _poll(client, answer or started, timeout)
    except HarnessError as exc:
        report.add("accepts.stop", "fail", exc.message)
        return
    if final.status not in FINAL_STATUSES:
        report.add(
            "accepts.stop",
            "fail",
            f"run {final.id} still {final.status} {timeout:g} s after the stop; report a "
            "final status once the trajectory is complete",
        )
    elif final.status == "stopped":
        report.add("accepts.stop", "pass", f"run {final.id} stopped")
    else:
        report.add(
            "accepts.stop",
            "pass",
            f"run {final.id} ended {final.status} (it finished before the stop took effect)",
        )
