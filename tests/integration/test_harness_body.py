"""The harness client reads a body whole, in as many chunks as it comes, and refuses one
over its cap (64 MiB; lowered here) without holding more than the cap."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from evalkit.harness import client as harness_client
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.http1 import Http1Client

BODY = bytes(range(256)) * 4096  # 1 MiB, every byte value


@pytest.fixture
def harness() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()  # no length: the body ends with the connection
            for at in range(0, len(BODY), 10_000):
                self.wfile.write(BODY[at : at + 10_000])
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_body_in_many_chunks_arrives_whole(harness: str) -> None:
    async with Http1Client(None, timeout=10, connect_timeout=10) as http:
        assert await HarnessClient(harness, None, http).trajectory("r1") == BODY


async def test_a_body_over_the_cap_is_refused(harness: str, monkeypatch) -> None:
    monkeypatch.setattr(harness_client, "MAX_BODY_BYTES", len(BODY) - 1)
    async with Http1Client(None, timeout=10, connect_timeout=10) as http:
        with pytest.raises(HarnessError, match="answer larger than") as refused:
            await HarnessClient(harness, None, http).trajectory("r1")
    assert not refused.value.retryable
    monkeypatch.setattr(harness_client, "MAX_BODY_BYTES", len(BODY))
    async with Http1Client(None, timeout=10, connect_timeout=10) as http:
        assert await HarnessClient(harness, None, http).trajectory("r1") == BODY
