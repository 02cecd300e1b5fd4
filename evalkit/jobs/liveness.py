"""Telling a dead worker from a slow one: each worker's liveness lock.

A worker holds a session-level advisory lock, keyed on its procrastinate worker id, on a
database session of its own (:class:`Liveness`) from before it takes its first job until
it has let go of its last. A process that ends, killed or not, closes its sockets, so
PostgreSQL ends the session and the lock goes at once; a worker busy for minutes, or whose
event loop is stuck, keeps it. A worker is dead (:attr:`WorkerLiveness.dead`) when no
session holds its lock and its heartbeat, which procrastinate sends every
:data:`HEARTBEAT_SECONDS` on another connection, is more than :data:`SILENT_SECONDS` old:
the heartbeat covers the moments a live worker spends taking its lock again on a new
session after the old one broke. A machine that stops answering without closing its
connections loses the lock when PostgreSQL gives up on the connection, after
``worker.stalled_seconds`` (TCP keepalives set on the session).

:func:`evalkit.jobs.maintenance.take_back_abandoned_jobs` reads these facts and puts the
dead workers' jobs back in the queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from evalkit.db import Conn
from evalkit.errors import DatabaseError

log = logging.getLogger("evalkit.jobs")

LOCK_NAMESPACE = 1702260588
"""The first key of every liveness lock (the second is the worker id); no other advisory
lock of evalkit or procrastinate takes two keys."""
HEARTBEAT_SECONDS = 1.0
"""How often a worker's procrastinate heartbeat is sent."""
SILENT_SECONDS = 3.0
"""A worker without its lock is dead once its heartbeat is this old (three missed)."""
POLL_SECONDS = 5.0
"""How often the liveness session is used (idle sessions may be ended by a timeout or a
NAT), and so how soon a broken one is noticed and replaced."""
RECONNECT_SECONDS = (0.5, 5.0)
"""The first and the longest wait between attempts to take the lock again."""
ANSWER_SECONDS = 10.0
"""The least time a connection or a ping of the session is given before the session
counts as broken (more when ``lost_after`` is longer): a slow answer on a loaded database
must not make a live worker drop its own lock."""


class LivenessLost(DatabaseError):
    """The worker cannot hold its liveness lock: it stops (and starts again as another
    worker, see :func:`evalkit.serve.run_worker`)."""


@dataclass(frozen=True)
class WorkerLiveness:
    """One registered worker, as :func:`workers` reads it."""

    id: int
    locked: bool
    silent_for: float
    """Seconds since its last heartbeat."""
    doing: int
    """Jobs it is running."""

    @property
    def dead(self) -> bool:
        return not self.locked and self.silent_for > SILENT_SECONDS

    @property
    def dying(self) -> bool:
        """Without its lock but not silent long enough yet: dead soon, unless it takes its
        lock again (or it just registered and is about to take it)."""
        return not self.locked and not self.dead

    def stuck(self, stalled_seconds: float) -> bool:
        """It holds its lock but has sent no heartbeat for ``stalled_seconds``: its event
        loop is blocked. It keeps its jobs (it may still finish them)."""
        return self.locked and self.silent_for > stalled_seconds


async def workers(conn: Conn) -> list[WorkerLiveness]:
    rows = await conn.all("procrastinate_worker_liveness", namespace=LOCK_NAMESPACE)
    return [WorkerLiveness(**row) for row in rows]


def seconds_until_next_death(found: list[WorkerLiveness]) -> float | None:
    """When the first dying worker with jobs counts as dead (None: no such worker)."""
    waits = [SILENT_SECONDS - w.silent_for for w in found if w.dying and w.doing]
    return max(min(waits), 0.0) if waits else None


def keepalives(lost_after: float) -> dict[str, int]:
    """Server-side TCP keepalives that give up on a silent client after about
    ``lost_after`` seconds: half of it idle, then three probes over the other half."""
    idle = max(1, math.ceil(lost_after / 2))
    interval = max(1, math.ceil(lost_after / 6))
    return {
        "idle": idle,
        "interval": interval,
        "count": 3,
        "user_timeout_ms": max(1000, math.ceil(lost_after * 1000)),
    }


class Liveness:
    """The database session that holds one worker's liveness lock.

    :meth:`open` before the worker registers (so taking the lock is one statement on an
    open session, not a connection), :meth:`hold` once its id is known and before it
    fetches a job, :meth:`keep` while it runs, :meth:`close` once it has let go of its
    jobs (ending the session releases the lock)."""

    def __init__(self, url: str, *, lost_after: float) -> None:
        self.url = url
        self.lost_after = lost_after
        self.worker_id: int | None = None
        self._conn: Conn | None = None

    @property
    def _patience(self) -> float:
        return max(ANSWER_SECONDS, self.lost_after)

    async def open(self) -> None:
        self._conn = await self._connect()

    async def hold(self, worker_id: int) -> None:
        assert self._conn is not None, "open the liveness session first"
        await self._conn.one("worker_liveness_lock", namespace=LOCK_NAMESPACE, worker_id=worker_id)
        self.worker_id = worker_id

    async def keep(self) -> None:
        """Use the session every :data:`POLL_SECONDS`; when it broke, take the lock again on
        a new one. Raises :class:`LivenessLost` when that fails for ``lost_after`` seconds,
        or when the worker was taken as dead meanwhile (a sweep unregistered it)."""
        while True:
            await asyncio.sleep(min(POLL_SECONDS, self.lost_after / 2))
            try:
                assert self._conn is not None
                await asyncio.wait_for(self._conn.one("worker_liveness_ping"), self._patience)
            except (DatabaseError, TimeoutError) as exc:
                log.warning(
                    "worker %s: its liveness session broke (%s); taking its lock again",
                    self.worker_id,
                    exc or type(exc).__name__,
                )
                await self._take_again()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.raw.close()

    async def _take_again(self) -> None:
        assert self.worker_id is not None
        await self.close()
        loop = asyncio.get_running_loop()
        began, wait = loop.time(), RECONNECT_SECONDS[0]
        while True:
            try:
                conn = await self._connect()
                row = await conn.one("procrastinate_worker_registered", worker_id=self.worker_id)
                if not (row and row["registered"]):
                    await conn.raw.close()
                    raise LivenessLost(
                        f"worker {self.worker_id} was taken as dead while its liveness "
                        "session was down, and its jobs were queued again"
                    )
                self._conn = conn
                await self.hold(self.worker_id)
                log.warning("worker %s: holds its liveness lock again", self.worker_id)
                return
            except LivenessLost:
                raise
            except DatabaseError as exc:
                await self.close()
                if loop.time() - began > self.lost_after:
                    raise LivenessLost(
                        f"worker {self.worker_id} could not take its liveness lock again "
                        f"for {self.lost_after:g} s (worker.stalled_seconds): {exc}"
                    ) from exc
                await asyncio.sleep(wait)
                wait = min(wait * 2, RECONNECT_SECONDS[1])

    async def _connect(self) -> Conn:
        try:
            raw: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=math.ceil(self._patience),
            )
        except psycopg.Error as exc:
            raise DatabaseError(f"the database did not answer ({exc}); is it running?") from exc
        conn = Conn(raw)
        try:
            await conn.execute("worker_liveness_keepalives", **keepalives(self.lost_after))
        except DatabaseError:
            await raw.close()
            raise
        return conn
