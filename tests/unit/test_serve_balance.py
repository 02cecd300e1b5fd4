"""Balance: an edge process two requests busier than the least busy one answers with
``Connection: close`` (so that its client connects again, likely to another process)."""

from __future__ import annotations

from typing import Any

from evalkit.serve import InFlight

Message = dict[str, Any]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A plain ASGI app: one response, or the lifespan protocol's first exchange."""
    if scope["type"] == "lifespan":
        message = await receive()
        assert message == {"type": "lifespan.startup"}
        await send({"type": "lifespan.startup.complete"})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"ok"})


async def call(wrapped: Any, scope_type: str) -> list[Message]:
    sent: list[Message] = []
    first = {"type": "lifespan.startup"} if scope_type == "lifespan" else {"type": "http.request"}

    async def receive() -> Message:
        return first

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": scope_type}
    if scope_type == "http":
        scope.update(method="GET", path="/readyz", headers=[])
    await wrapped(scope, receive, send)
    return sent


async def test_the_busier_process_asks_its_client_to_reconnect():
    in_flight = InFlight(2)
    wrapped = in_flight.process(0).wrap(app)
    in_flight.counts[1] = 0
    # Process 0 has this request in flight plus one: 2 against process 1's none.
    in_flight.counts[0] = 1
    sent = await call(wrapped, "http")
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["headers"] == [(b"content-type", b"text/plain"), (b"connection", b"close")]
    assert sent[1] == {"type": "http.response.body", "body": b"ok"}
    assert list(in_flight.counts) == [1, 0], "the request is counted out when it ends"


async def test_a_balanced_process_keeps_the_connection():
    in_flight = InFlight(2)
    wrapped = in_flight.process(0).wrap(app)
    in_flight.process(1)
    sent = await call(wrapped, "http")  # 1 in flight against 0: within one
    assert sent[0]["headers"] == [(b"content-type", b"text/plain")]
    in_flight.counts[1] = 3  # the other process is the busier one
    in_flight.counts[0] = 2
    sent = await call(wrapped, "http")
    assert sent[0]["headers"] == [(b"content-type", b"text/plain")]
    assert list(in_flight.counts) == [2, 3]


async def test_lifespan_passes_straight_through():
    in_flight = InFlight(2)
    wrapped = in_flight.process(0).wrap(app)
    in_flight.counts[0] = 5  # far busier, but lifespan is no request
    sent = await call(wrapped, "lifespan")
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert list(in_flight.counts) == [5, 0], "lifespan is not counted"
