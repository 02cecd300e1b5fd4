"""Balance: an edge process that serves two active client connections more than the process
serving the fewest answers with ``Connection: close`` (so that the client connects again,
likely to another process), and forgets that client."""

from __future__ import annotations

from typing import Any

from evalkit.serve import ACTIVE_SECONDS, Clients

Message = dict[str, Any]
PLAIN = [(b"content-type", b"text/plain")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A plain ASGI app: one response, or the lifespan protocol's first exchange."""
    if scope["type"] == "lifespan":
        message = await receive()
        assert message == {"type": "lifespan.startup"}
        await send({"type": "lifespan.startup.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": list(PLAIN)})
    await send({"type": "http.response.body", "body": b"ok"})


async def call(wrapped: Any, scope_type: str, client: tuple[str, int] | None) -> list[Message]:
    sent: list[Message] = []
    first = {"type": "lifespan.startup"} if scope_type == "lifespan" else {"type": "http.request"}

    async def receive() -> Message:
        return first

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": scope_type}
    if scope_type == "http":
        scope.update(method="GET", path="/readyz", headers=[], client=client)
    await wrapped(scope, receive, send)
    return sent


async def test_a_process_with_two_clients_more_hands_one_over():
    clients = Clients(2)
    mine, other = clients.process(0), clients.process(1)
    wrapped = mine.wrap(app)
    assert (await call(wrapped, "http", ("127.0.0.1", 1001)))[0]["headers"] == PLAIN
    assert list(clients.counts) == [1, 0], "one client against none: within one"

    sent = await call(wrapped, "http", ("127.0.0.1", 1002))
    assert sent[0]["headers"] == [*PLAIN, (b"connection", b"close")]
    assert sent[1] == {"type": "http.response.body", "body": b"ok"}
    assert list(clients.counts) == [1, 0], "the client told to reconnect is forgotten"
    assert other.active == {}

    # the same client again on its kept connection: still one, nothing handed over
    assert (await call(wrapped, "http", ("127.0.0.1", 1001)))[0]["headers"] == PLAIN


async def test_requests_on_the_same_connections_hand_nothing_over():
    clients = Clients(2)
    first, second = clients.process(0).wrap(app), clients.process(1).wrap(app)
    for port in (1, 2, 3, 4):
        await call(first, "http", ("10.0.0.1", port))
        await call(second, "http", ("10.0.0.2", port))
    assert list(clients.counts) == [4, 4]
    for _ in range(5):  # however many requests each connection sends
        for port in (1, 2, 3, 4):
            assert (await call(first, "http", ("10.0.0.1", port)))[0]["headers"] == PLAIN
    assert list(clients.counts) == [4, 4]


async def test_a_quiet_connection_stops_counting_and_one_in_flight_does_not():
    clients = Clients(2)
    balance = clients.process(0)
    for port in (1, 2, 3):
        balance.arrived(("127.0.0.1", port), now=100.0)
    balance.ended(("127.0.0.1", 1), now=100.0)
    balance.ended(("127.0.0.1", 2), now=100.0)
    assert clients.counts[0] == 3
    later = 100.0 + ACTIVE_SECONDS + 0.1
    balance.arrived(("127.0.0.1", 4), now=later)
    assert clients.counts[0] == 2, "the two quiet ones no longer count; 3, still in flight, does"
    assert set(balance.active) == {("127.0.0.1", 3), ("127.0.0.1", 4)}


async def test_a_restarted_process_starts_from_none():
    clients = Clients(2)
    clients.counts[1] = 7  # what a process that died left behind
    clients.process(1)
    assert list(clients.counts) == [0, 0]


async def test_lifespan_and_unix_sockets_pass_straight_through():
    clients = Clients(2)
    wrapped = clients.process(0).wrap(app)
    clients.counts[0] = 5  # far more clients than process 1, but neither is a connection
    assert await call(wrapped, "lifespan", None) == [{"type": "lifespan.startup.complete"}]
    sent = await call(wrapped, "http", None)  # a Unix socket's scope has no client
    assert sent[0]["headers"] == PLAIN
    assert list(clients.counts) == [5, 0]


async def test_two_streams_of_one_connection_are_both_handed_over():
    """HTTP/2 can carry two requests of one client connection at once: both get
    ``Connection: close`` when the process serves too many, and the second finds the client
    already forgotten."""
    clients = Clients(2)
    balance = clients.process(0)
    for port in (1, 2):
        balance.arrived(("127.0.0.1", port), now=100.0)
    balance.arrived(("127.0.0.1", 3), now=100.0)  # the stream's client, twice in flight
    assert balance.hand_over(("127.0.0.1", 3)) is True
    clients.counts[0] = 3  # another client arrived meanwhile
    assert balance.hand_over(("127.0.0.1", 3)) is True
    assert ("127.0.0.1", 3) not in balance.active
