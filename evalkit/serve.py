"""Process wiring for ``evalkit server`` and ``evalkit worker``: database (embedded or
external), schema check, first-start admin, the HTTP edge on Hypercorn, the job worker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from procrastinate.exceptions import ConnectorException

from evalkit.auth import passwords
from evalkit.auth.secrets import GENERATE_KEY_COMMAND, generate_key
from evalkit.config import Settings, public_url
from evalkit.db import Database
from evalkit.embedded import EmbeddedPostgres
from evalkit.errors import ConfigError, Conflict, DatabaseError, EvalkitError
from evalkit.jobs import runtime
from evalkit.jobs.app import connected, load_tasks
from evalkit.jobs.liveness import HEARTBEAT_SECONDS, Liveness
from evalkit.jobs.maintenance import take_back_abandoned_jobs
from evalkit.jobs.procrastinate_adapter import NO_PRUNING_SECONDS, Worker
from evalkit.jobs.runs import queue_left_behind
from evalkit.sql import migrate
from evalkit.store import accounts

log = logging.getLogger("evalkit")

T = TypeVar("T")

ADMIN_PASSWORD_ENV = "EVALKIT_ADMIN_PASSWORD"
ADMIN_USERNAME = "admin"


@dataclass
class DatabaseTarget:
    url: str
    embedded: bool


@contextlib.contextmanager
def database_for(settings: Settings) -> Iterator[DatabaseTarget]:
    """The configured database, or the embedded one under ``data_dir`` (started for the
    duration of the block, stopped after unless another process still uses it)."""
    if settings.database.url:
        yield DatabaseTarget(settings.database.url, embedded=False)
        return
    embedded = EmbeddedPostgres(settings.data_path)
    url = embedded.start()
    try:
        yield DatabaseTarget(url, embedded=True)
    finally:
        embedded.stop()


def prepare_schema(target: DatabaseTarget) -> None:
    """The embedded database is evalkit's own, so it is migrated on start; an external one
    must be migrated by the operator (`evalkit db upgrade`), and a stale schema refuses."""
    if target.embedded:
        before, after = migrate.upgrade(target.url)
        if before != after:
            log.info("embedded database migrated from %s to %s", before or "empty", after)
    migrate.require_head(target.url)


def ensure_encryption_key(settings: Settings, target: DatabaseTarget) -> Settings:
    """With the embedded default, keep a generated key under the data dir; an external
    database needs an explicit ``encryption_key``."""
    if settings.encryption_key:
        return settings
    if not target.embedded:
        raise ConfigError(
            "encryption_key is not set; with an external database it must be set in config.yaml "
            f"or EVALKIT_ENCRYPTION_KEY (32 random bytes, base64): `{GENERATE_KEY_COMMAND}`"
        )
    key_file = settings.data_path / "encryption.key"
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(generate_key())
    settings.encryption_key = key_file.read_text().strip()
    return settings


async def ensure_admin(db: Database, env: dict[str, str]) -> str | None:
    """Create ``admin`` from ``EVALKIT_ADMIN_PASSWORD`` on first start; refuse to start with
    no admin and no password. Returns a line to print, or None."""

    try:
        async with db.transaction() as conn:
            if await accounts.admin_exists(conn):
                return None
            password = env.get(ADMIN_PASSWORD_ENV)
            if not password:
                raise ConfigError(
                    f"this server has no admin yet: set {ADMIN_PASSWORD_ENV} (8 to 72 bytes) "
                    "for the first start and it creates the user 'admin' with that password"
                )
            try:
                passwords.check_password_rules(password, what=ADMIN_PASSWORD_ENV)
            except EvalkitError as exc:
                raise ConfigError(exc.message) from None
            await accounts.create_user(conn, ADMIN_USERNAME, password, is_admin=True)
    except Conflict:
        return None  # another edge replica, starting at the same moment, created it
    return f"created admin user '{ADMIN_USERNAME}' from {ADMIN_PASSWORD_ENV}"


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror}); stop what uses it or pass "
                "--port (or set server.port)"
            ) from None


WORKER_RESTART_SECONDS = (0.5, 10.0)
"""The first and the longest wait before the job worker starts again after it stopped."""

JOB_GRACE_SECONDS = 10.0
"""How long a stopping worker lets its running jobs finish before it aborts them (aborted
jobs are queued again; a run's step is taken again by the next worker)."""


async def run_worker(db_url: str, settings: Settings, stop: asyncio.Event) -> None:
    """Run procrastinate's worker until ``stop`` is set.

    Procrastinate stops its worker when the database goes away (its listener, heartbeat or
    job fetch fails). This starts it again, after 0.5 s, then twice as long each time up
    to 10 s, so a database restart or failover needs no one to restart the process. The
    jobs a stopped worker still held (it could not tell the database it stopped) are put
    back in the queue as soon as the database answers, not a stalled-worker time later.
    """

    jobs = load_tasks()
    jobs.perform_import_paths()
    options: dict[str, Any] = {
        **jobs.worker_defaults,
        "concurrency": settings.worker.concurrency,
        "install_signal_handlers": False,
        "name": f"evalkit-{socket.gethostname()}-{os.getpid()}",
        "update_heartbeat_interval": HEARTBEAT_SECONDS,
        "fetch_job_polling_interval": settings.worker.job_poll_seconds,
        "stalled_worker_timeout": NO_PRUNING_SECONDS,
        "shutdown_graceful_timeout": JOB_GRACE_SECONDS,
    }
    loop = asyncio.get_running_loop()
    wait = WORKER_RESTART_SECONDS[0]
    leftover: list[int] = []
    """Ids of stopped workers of this process still registered, holding their jobs."""
    stopper = asyncio.create_task(stop.wait())
    try:
        async with connected(db_url, max_size=settings.worker.concurrency + 2):
            while not stop.is_set():
                began = loop.time()
                liveness = Liveness(db_url, lost_after=settings.worker.stalled_seconds)
                worker = Worker(app=jobs, liveness=liveness, **options)
                task = asyncio.create_task(_worker_round(jobs, worker, leftover, settings))
                await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                        await asyncio.wait_for(task, timeout=30)
                    break
                error = None if task.cancelled() else task.exception()
                if error is not None and not _database_gone(error):
                    raise error
                if worker.worker_id is not None:
                    leftover.append(worker.worker_id)
                if loop.time() - began > 60:
                    wait = WORKER_RESTART_SECONDS[0]
                log.warning(
                    "the job worker stopped (%s); starting it again in %.1f s",
                    _cause(error) if error else "it lost its database connection",
                    wait,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stopper), timeout=wait)
                wait = min(wait * 2, WORKER_RESTART_SECONDS[1])
    finally:
        stopper.cancel()
        await runtime.close()


async def _worker_round(jobs: Any, worker: Any, leftover: list[int], settings: Settings) -> None:
    """Let go of the stopped workers' jobs (unregistered, they have no worker: taken
    back at once), queue again the jobs of dead workers (see :mod:`evalkit.jobs.liveness`),
    queue a step for the runs that no job holds (a dead worker was driving them), then run
    the worker until it stops."""

    while leftover:
        await jobs.job_manager.unregister_worker(leftover[-1])
        leftover.pop()
    await take_back_abandoned_jobs(jobs, runtime.database(), settings.worker.stalled_seconds)
    await queue_left_behind(runtime.database())
    await worker.run()


def _database_gone(error: BaseException) -> bool:
    """The round stopped because the database went away: procrastinate's own calls raise
    ConnectorException, evalkit's (the sweep of runs left behind at start) DatabaseError."""
    return isinstance(error, ConnectorException | DatabaseError)


def _cause(error: BaseException) -> str:
    """The first line of the innermost cause: procrastinate's own message is generic."""
    while error.__cause__ is not None:
        error = error.__cause__
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


async def run(
    settings: Settings,
    db_url: str,
    *,
    edge: bool = True,
    worker: bool = False,
    stop: asyncio.Event | None = None,
    announce: asyncio.Event | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when ``stop`` is None)."""

    stop = stop or _stop_on_signals()
    db = Database(db_url, min_size=settings.database.pool_min, max_size=settings.database.pool_max)
    await db.open()
    try:
        if edge:
            message = await ensure_admin(db, dict(os.environ) if env is None else env)
            if message:
                log.warning(message)
        tasks = []
        if worker:
            runtime.install(db, settings)
            tasks.append(asyncio.create_task(run_worker(db_url, settings, stop)))
        if edge:
            # Imported here: `evalkit worker` alone never loads the edge (Starlette, the web
            # pages, the OIDC client) nor Hypercorn, about 450 modules of its start.
            from evalkit.edge.app import create_app

            app = create_app(settings, db, manage_pool=False)
            tasks.append(asyncio.create_task(_serve_http(app, settings, stop, announce)))
        elif announce is not None:
            announce.set()
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if task.exception():
                raise task.exception()  # type: ignore[misc]
    finally:
        await db.close()


async def _serve_http(
    app: object, settings: Settings, stop: asyncio.Event, announce: asyncio.Event | None
) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig

    config = HypercornConfig()
    config.bind = [f"{settings.server.host}:{settings.server.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 10
    config.keep_alive_timeout = 75

    async def shutdown_trigger() -> None:
        if announce is not None:
            # Hypercorn may ask for the trigger before its socket listens: announce (and
            # let `evalkit try` or a test call the server) only once it accepts.
            await _until_listening(settings.server.host, settings.server.port, stop)
            announce.set()
        await stop.wait()

    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)  # type: ignore[arg-type]


async def _until_listening(host: str, port: int, stop: asyncio.Event) -> None:
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection(target, port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between two passes of Python's cyclic collector over young objects (700 by
default)."""


def tune_gc_for_serving() -> None:
    """Tune Python's cyclic garbage collector for a server process, once it is up.

    Each request (an OTLP batch above all) allocates thousands of short-lived objects,
    which refcounting frees; the cyclic collector, run every 700 allocations by default,
    walks the requests in flight again and again, and its full passes walk every object in
    the process (100 ms and more, with every request in flight waiting: it showed in the
    p99 ack latency of OTLP ingest). What exists once the server is up (modules, routes,
    settings) lives as long as the process, so it is moved out of the collector's sight
    (``gc.freeze``: full passes then take a few ms), and the young generation is collected
    every ``GC_YOUNG_THRESHOLD`` allocations. Called by ``evalkit server`` only: a process
    that starts servers and stops them again (tests) must keep collecting what it made."""
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, *older)


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a server process's main coroutine on uvloop where it is installed (not on
    Windows), else on asyncio's own loop. Measured with benchmarks/otlp_ingest.py on 2 cores,
    old tree against new alternately: 1.10 times the spans stored a second, at 0.96 of the
    edge's CPU a batch. Behaviour is the same on either loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for tests, benchmarks and `evalkit try`)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class ThreadedServer:
    """The edge (and optionally a worker) on its own event loop in a background thread, for
    code that runs a server beside other work in one process. ``stop()`` ends it."""

    def __init__(
        self,
        settings: Settings,
        db_url: str,
        *,
        worker: bool = False,
        env: dict[str, str] | None = None,
        start_timeout: float = 60,
    ) -> None:
        self.settings = settings
        self.db_url = db_url
        self.url = public_url(settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        started = threading.Event()

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            ready = asyncio.Event()
            asyncio.create_task(ready.wait()).add_done_callback(lambda _: started.set())
            await run(settings, db_url, worker=worker, stop=self._stop, announce=ready, env=env)

        def thread_main() -> None:
            try:
                run_event_loop(main())
            except BaseException as exc:
                self._error = exc
                started.set()

        self._thread = threading.Thread(target=thread_main, name="evalkit-server", daemon=True)
        self._thread.start()
        if not started.wait(start_timeout):
            raise EvalkitError(f"the server did not start within {start_timeout:.0f} s")
        if self._error is not None:
            raise self._error

    def stop(self, timeout: float = 60) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise EvalkitError(
                f"the server did not stop within {timeout:.0f} s; it waits in:\n"
                + self._where_it_waits()
            )

    def _where_it_waits(self) -> str:
        """The server thread's stack and its event loop's pending tasks, for the error."""
        frame = sys._current_frames().get(self._thread.ident or -1)
        lines = traceback.format_stack(frame) if frame is not None else []
        if self._loop is not None:
            for task in list(asyncio.all_tasks(self._loop)):
                stack = task.get_stack(limit=1)
                where = traceback.format_stack(stack[-1], limit=1) if stack else ["(no frame)"]
                lines.append(f"task {task.get_name()}: {where[-1].strip()}\n")
        return "".join(lines)
