"""``evalkit harness ...``: the reference harness, and checking a harness against the
Harness API contract."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import app
from evalkit.cli.output import CliError, note, say

harness = App(
    name="harness",
    help="Harnesses: the Harness API agents implement so evalkit can run them.",
)
app.command(harness)


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
