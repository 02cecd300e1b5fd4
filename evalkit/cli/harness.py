"""``evalkit harness ...``: the reference harness, and checking a harness against the
Harness API contract."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Annotated

import httpx
import msgspec
from cyclopts import App, Parameter

from evalkit.cli.agents import key_from_env
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import agents as agents_wire
from evalkit.model import api
from evalkit.model.harness_check import (
    DEFAULT_CHECK_TIMEOUT,
    MAX_CHECK_TIMEOUT,
    CheckReport,
    HarnessCheckRequest,
)

harness = App(
    name="harness",
    help="Harnesses: the Harness API agents implement so evalkit can run them.",
)


@harness.command(name="example")
def harness_example(
    *,
    host: Annotated[str, Parameter(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, Parameter(help="Port to listen on (0: any free port).")] = 8700,
    api_key_env: Annotated[
        str | None,
        Parameter(
            help="Name of an environment variable holding an API key: requests without "
            "`Authorization: Bearer <key>` are then refused."
        ),
    ] = None,
    run_seconds: Annotated[
        float, Parameter(help="Seconds each run takes before it reaches its final status.")
    ] = 0.0,
) -> int:
    """Serve the reference harness in the foreground until Ctrl-C.

    A complete Harness API v1 implementation around a tiny deterministic agent: it answers
    arithmetic questions ("What is 2 + 3?") with a calculator tool call, echoes anything
    else, reads input files (inline or by URL) and returns ATIF trajectories. Register it
    with `evalkit agents create NAME --harness-url URL` to try evalkit, or read its source
    (evalkit/harness/reference.py) as an example of the contract.
    """
    from evalkit.harness.reference import Behaviour, base_url, create_app, listen, serve

    if run_seconds < 0:
        raise CliError("--run-seconds must be 0 or more", exit_code=2)
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise CliError(
                f"--api-key-env names {api_key_env}, but it is not set: export {api_key_env}=... "
                "and run the command again"
            )
    sock = listen(host, port)
    url = base_url(sock)
    application = create_app(Behaviour(run_seconds=run_seconds), api_key)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(application, sock, stop.wait)

    say(f"reference harness listening on {url}")
    note(
        f"try: evalkit agents create example --harness-url {url}"
        + (f" --api-key-env {api_key_env}" if api_key_env else "")
        + "   (Ctrl-C stops it)"
    )
    sys.stdout.flush()
    asyncio.run(main())
    return 0


@harness.command(name="check")
def harness_check(
    ref: Annotated[
        str, Parameter(help="The agent: NAME@WORKSPACE, or NAME for your personal workspace.")
    ],
    /,
    *,
    timeout: Annotated[
        float,
        Parameter(help="Seconds each of the check's runs may take to reach a final status."),
    ] = DEFAULT_CHECK_TIMEOUT,
    json: JsonFlag = False,
) -> int:
    """Check an agent's harness against the capabilities it declares; exit 1 on any fail.

    Fetches the capabilities, runs one trivial case ("What is 2 + 3?", with one input file:
    by URL when the harness accepts file URLs, inline when it accepts only inline files),
    then exercises every declared capability: trajectory (fetched and validated as ATIF),
    tool calls, thinking and token usage (looked for in it), run listing, workspace files,
    and stop (on a second run). Prints one row per capability: pass, fail with the reason,
    or skipped (not declared, or nothing to verify it with).

    A shared agent is checked by the server, as it will drive it (its stored key, its
    egress policy). A personal agent is checked from this machine by its owner, with the
    key from the variable its --api-key-env names.
    """
    if not 0 < timeout <= MAX_CHECK_TIMEOUT:
        raise CliError(f"--timeout must be above 0 and at most {MAX_CHECK_TIMEOUT:g}", 2)
    with Client() as client:
        resolved = client.resolve(ref, "agent")
        ws: api.Workspace = client.get(f"/api/workspaces/{resolved.workspace}", type=api.Workspace)
        path = f"/api/workspaces/{resolved.workspace}/agents/{resolved.name}"
        agent: agents_wire.Agent = client.get(path, type=agents_wire.Agent)
        if not agent.harness_url:
            raise CliError(
                f"{resolved.name}@{resolved.workspace} is code-driven (no harness URL): there "
                "is no harness to check"
            )
        if ws.kind == "shared":
            # The check's runs can take up to `timeout` each; the HTTP call waits for all.
            client.http.timeout = httpx.Timeout(3 * timeout + 60)
            report: CheckReport = client.post(
                path + "/check", HarnessCheckRequest(timeout=timeout), type=CheckReport
            )
        else:
            report = _check_personal(client, ws, agent, timeout)
    if json:
        emit_json(report)
    else:
        say(f"{report.agent} at {report.harness_url}")
        table(
            [(r.capability, r.result.upper(), r.detail) for r in report.rows],
            ["capability", "result", "detail"],
        )
        failed = sum(r.result == "fail" for r in report.rows)
        say("all declared capabilities pass" if report.ok else f"{failed} check(s) failed")
    return 0 if report.ok else 1


def _check_personal(
    client: Client, ws: api.Workspace, agent: agents_wire.Agent, timeout: float
) -> CheckReport:
    """A personal agent: only its owner checks it, from this machine (where the harness
    usually runs), with the key from the agent's api_key_env."""
    from evalkit.auth.access import RULES
    from evalkit.harness.check import check_harness
    from evalkit.harness.client import HarnessClient
    from evalkit.http1 import Http1Client

    ref = f"{agent.name}@{agent.workspace}"
    if client.personal_workspace() != ws.name:
        raise CliError(
            f"{ref} is a personal agent of @{ws.name}'s owner; "
            f"{RULES['personal-agent-owner-only']} [personal-agent-owner-only]"
        )
    api_key = key_from_env(agent)
    file_url = _signed_check_file_url(client, ws.name)
    harness_url = agent.harness_url or ""

    async def run() -> CheckReport:
        async with Http1Client(None, timeout=min(30.0, timeout)) as http:
            harness_client = HarnessClient(harness_url, api_key, http)
            return await check_harness(
                harness_client, file_url=file_url, timeout=timeout, agent=ref
            )

    return asyncio.run(run())


def _signed_check_file_url(client: Client, workspace: str) -> str | None:
    """Upload the check's input file to your workspace and get a signed URL for it; None
    (the harness then gets the file inline, if it can) when the server cannot sign."""
    from evalkit.harness.check import CHECK_FILE_BYTES, CHECK_FILE_SHA256
    from evalkit.model.fixtures import SignedFixtureUrl

    put = client.http.put(
        f"/api/workspaces/{workspace}/fixtures/{CHECK_FILE_SHA256}",
        content=CHECK_FILE_BYTES,
        headers={"Content-Type": "application/octet-stream"},
    )
    if put.status_code >= 400:
        note(f"cannot upload the check's input file: {client.explain(put)}")
        return None
    signed = client.http.post(f"/api/fixtures/{CHECK_FILE_SHA256}/url")
    if signed.status_code >= 400:
        note(f"cannot get a signed URL for the check's input file: {client.explain(signed)}")
        return None
    url: str = msgspec.json.decode(signed.content, type=SignedFixtureUrl).url
    return url
