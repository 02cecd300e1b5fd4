"""The server's event loop: uvloop where it is installed, asyncio's own loop otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from evalkit.serve import run_event_loop


async def loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_a_server_process_runs_on_uvloop() -> None:
    assert run_event_loop(loop_module()).startswith("uvloop")


def test_without_uvloop_it_runs_on_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert run_event_loop(loop_module()).startswith("asyncio")
