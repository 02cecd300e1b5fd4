"""A TCP proxy on loopback that can hold the server's answers and then lose them.

Between a client and the edge it copies bytes both ways. While ``hold`` is on, what the
edge answers is kept back; ``drop_held`` then resets every client connection whose answer
was kept, so the client never hears it. With the edge killed in between, that is an export
committed by the edge whose answer was lost: the client must send it again, and the edge
must not store it twice. A kill lands in that window (after the commit, before the answer
leaves the process) only by luck; the proxy makes it land there on purpose.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    held: list[bytes] = field(default_factory=list)
    closed: bool = False


class LossyProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.lock = threading.Lock()
        self.pairs: list[_Pair] = []
        self.holding = False
        self.lost_answers: list[bytes] = []
        """The status line of each answer kept back and never delivered."""
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    # ------------------------------------------------------------------ control

    def hold(self) -> None:
        with self.lock:
            self.holding = True

    def held(self) -> int:
        """Connections with an answer kept back now."""
        with self.lock:
            return sum(1 for pair in self.pairs if pair.held and not pair.closed)

    def drop_held(self) -> int:
        """Reset every client connection whose answer is kept back; stop holding. Returns
        how many answers were lost."""
        with self.lock:
            self.holding = False
            lost = [pair for pair in self.pairs if pair.held and not pair.closed]
            for pair in lost:
                self.lost_answers.append(b"".join(pair.held).split(b"\r\n", 1)[0])
                pair.held.clear()
                self._close(pair, reset=True)
        return len(lost)

    def stop(self) -> None:
        self.listener.close()
        with self.lock:
            for pair in self.pairs:
                self._close(pair, reset=True)

    # ------------------------------------------------------------------ plumbing

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                # The edge is down: refuse as it would (a reset, not a hang).
                self._reset(client)
                continue
            pair = _Pair(client, upstream)
            with self.lock:
                self.pairs = [p for p in self.pairs if not p.closed]
                self.pairs.append(pair)
            threading.Thread(target=self._pump_up, args=(pair,), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(pair,), daemon=True).start()

    def _pump_up(self, pair: _Pair) -> None:
        """Client to edge: always copied."""
        while True:
            try:
                data = pair.client.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self.lock:
                    self._close(pair)
                return
            try:
                pair.upstream.sendall(data)
            except OSError:
                with self.lock:
                    self._close(pair, reset=True)
                return

    def _pump_down(self, pair: _Pair) -> None:
        """Edge to client: kept back while holding."""
        while True:
            try:
                data = pair.upstream.recv(65536)
            except OSError:
                data = b""
            with self.lock:
                if not data:
                    # The edge closed (or died): an answer kept back stays kept back until
                    # drop_held decides; otherwise the client sees the connection end.
                    if not pair.held:
                        self._close(pair, reset=True)
                    return
                if self.holding or pair.held:
                    pair.held.append(data)
                    continue
            try:
                pair.client.sendall(data)
            except OSError:
                with self.lock:
                    self._close(pair, reset=True)
                return

    def _close(self, pair: _Pair, *, reset: bool = False) -> None:
        if pair.closed:
            return
        pair.closed = True
        if reset:
            self._reset(pair.client)
        else:
            pair.client.close()
        with contextlib.suppress(OSError):
            pair.upstream.shutdown(socket.SHUT_RDWR)
        pair.upstream.close()

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        """End the connection at once, RST rather than an orderly close (SO_LINGER 0), as
        a dead peer's kernel would. ``shutdown`` first: a close alone leaves the socket
        open while the other pump thread still waits in ``recv`` on it."""
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
