"""Process wiring for ``evalkit server`` and ``evalkit worker``: database (embedded or
external), schema check, first-start admin, the HTTP edge (evalkit.asgi_server), the job worker."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import mmap
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
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


async def ensure_admin_at(db_url: str) -> None:
    """:func:`ensure_admin` on a connection of its own, logging what it did: run once by
    the process that forks the edge processes, so that a first start without a password
    is refused once, not by each of them."""
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    try:
        message = await ensure_admin(db, dict(os.environ))
        if message:
            log.warning(message)
    finally:
        await db.close()


def check_port_free(host: str, port: int) -> None:
    _bound_socket(host, port).close()


def _bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, or a ConfigError saying the port is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); stop what uses it or pass "
            "--port (or set server.port)"
        ) from None
    return sock


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
    listener: socket.socket | None = None,
    balance: Balance | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when ``stop`` is None). The edge
    accepts on ``listener`` when given (a socket already listening, as each process of
    :func:`serve_in_processes` has), else on a socket of its own at server.host:port."""

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
            # pages, the OIDC client) nor uvicorn, about 450 modules of its start.
            from evalkit.edge.app import create_app

            app = create_app(settings, db, manage_pool=False)
            if balance is not None:
                app = balance.wrap(app)
            tasks.append(asyncio.create_task(_serve_http(app, settings, stop, announce, listener)))
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
    app: object,
    settings: Settings,
    stop: asyncio.Event,
    announce: asyncio.Event | None,
    listener: socket.socket | None,
) -> None:
    from evalkit.asgi_server import serve_asgi

    if listener is None:
        sock = listening_socket(settings.server.host, settings.server.port)
    else:  # each edge process serves on its own copy of the socket they all accept from
        sock = socket.socket(fileno=os.dup(listener.fileno()))
    if announce is not None:
        announce.set()  # it listens already: connections wait in its queue
    await serve_asgi(app, sock, stop.wait, keep_alive_seconds=75, graceful_seconds=10)


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


# --------------------------------------------------------------------------- processes

MAX_AUTO_PROCESSES = 4
"""The most edge processes ``server.processes: 0`` starts: each holds a pool of up to
``database.pool_max`` connections, and PostgreSQL allows 100 by default."""

CHILD_RESTART_SECONDS = 1.0
"""How long the supervisor waits before it starts again an edge process that died."""

STOP_SECONDS = 30.0
"""How long the supervisor waits for its edge processes to stop before it kills them."""


def edge_process_count(settings: Settings) -> int:
    """How many processes serve the edge: ``server.processes``, or with 0 one per CPU core
    this process may use, at most :data:`MAX_AUTO_PROCESSES` (one where there is no fork)."""
    wanted = settings.server.processes
    if not hasattr(os, "fork"):
        if wanted > 1:
            raise ConfigError(
                f"server.processes is {wanted}, but this platform cannot fork: set it to 1 "
                "and run more servers behind a load balancer instead"
            )
        return 1
    if wanted:
        return wanted
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_AUTO_PROCESSES))


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's listening socket, made before the edge processes fork so that they all
    accept from it: the kernel hands each connection to whichever process takes it first,
    and one that is busy with a batch does not."""
    sock = _bound_socket(host, port)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


ACTIVE_SECONDS = 0.25
"""A client connection with a request in flight, or one that ended this recently, counts as
one its process serves."""

IN_FLIGHT = float("inf")


class Clients:
    """How many active client connections each edge process serves, counted in memory the
    processes share (mapped before they fork): what :class:`Balance` compares."""

    def __init__(self, processes: int) -> None:
        self._memory = mmap.mmap(-1, 4 * processes)
        self.counts = memoryview(self._memory).cast("i")

    def process(self, index: int) -> Balance:
        self.counts[index] = 0  # a process started again after one that died
        return Balance(self.counts, index)


class Balance:
    """Keeps the edge processes' shares of the clients even.

    The kernel hands a new connection to whichever process accepts it first, but a client's
    connection then stays where it landed: eight exporters that connect at the same moment
    can all land on one process while the others idle. So a process that serves two active
    connections more than the process serving the fewest answers with ``Connection:
    close``; the client connects again, and a process that is idle (waiting to accept, not
    busy with a batch) is the likelier to take the new connection. Connections, not
    requests in flight, are compared: those come and go with every request, and a process
    would hand clients over that were already evenly spread."""

    def __init__(self, counts: memoryview, index: int) -> None:
        self.counts = counts
        self.index = index
        self.active: dict[Any, float] = {}
        """Each client connection (its address and port) and when its last request ended
        (``IN_FLIGHT`` while one is)."""
        self._pruned = 0.0

    def arrived(self, client: Any, now: float) -> None:
        self.active[client] = IN_FLIGHT
        if now - self._pruned > ACTIVE_SECONDS / 4:
            self._pruned = now
            quiet = [c for c, ended in self.active.items() if now - ended > ACTIVE_SECONDS]
            for gone in quiet:
                del self.active[gone]
        self.counts[self.index] = len(self.active)

    def ended(self, client: Any, now: float) -> None:
        if client in self.active:  # not when it was handed over
            self.active[client] = now

    def hand_over(self, client: Any) -> bool:
        """Whether this process serves too many clients; if so, it forgets ``client``,
        which is about to be told to connect again."""
        if self.counts[self.index] <= min(self.counts) + 1:
            return False
        # pop: two HTTP/2 streams of one connection can both be told to close it
        self.active.pop(client, None)
        self.counts[self.index] = len(self.active)
        return True

    def wrap(self, app: Any) -> Any:
        async def balanced(scope: dict[str, Any], receive: Any, send: Any) -> None:
            client = scope.get("client")
            if scope["type"] != "http" or client is None:  # a Unix socket: nothing to spread
                await app(scope, receive, send)
                return
            self.arrived(client, time.monotonic())

            async def send_or_hand_over(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start" and self.hand_over(client):
                    headers = [*message.get("headers", ()), (b"connection", b"close")]
                    message = {**message, "headers": headers}
                await send(message)

            try:
                await app(scope, receive, send_or_hand_over)
            finally:
                self.ended(client, time.monotonic())

        return balanced


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

ChildMain = Callable[[int, Callable[[], None]], None]
"""What an edge process runs: its index (0 is the first) and a call that says it is ready."""


def serve_in_processes(count: int, child_main: ChildMain, announce: Callable[[], None]) -> int:
    """Run ``child_main`` in ``count`` forked processes and watch them until SIGINT or
    SIGTERM, which each of them gets too; the exit code.

    ``announce`` is called once every process has said it is ready. A process that dies
    after that is started again (its index kept, so the one that runs the job worker still
    does); one that dies before it stops the others, as a failed start of a single process
    would. The processes die with the supervisor, even when it is killed (Linux)."""
    ready_r, ready_w = os.pipe()
    supervisor = os.getpid()
    children: dict[int, int] = {}
    stopping = False

    def spawn(index: int) -> None:
        # A stop signal held back over the fork: it reaches the supervisor once the child
        # is in ``children``, and the child only once it has its own handlers.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                _run_child(index, child_main, ready_w, supervisor)
            children[pid] = index
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def stop_all(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop_all) for sig in STOP_SIGNALS}
    for index in range(count):
        spawn(index)
    code, ready, announced, stop_deadline = 0, 0, False, None
    try:
        while children:
            if select.select([ready_r], [], [], 0.2)[0]:
                ready += len(os.read(ready_r, 64))
                if ready >= count and not announced and not stopping:
                    announced = True
                    announce()
            if stopping and stop_deadline is None:
                stop_deadline = time.monotonic() + STOP_SECONDS
            if stop_deadline is not None and time.monotonic() > stop_deadline:
                code = code or 1  # a process that would not stop is no clean stop
                for pid in list(children):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            for pid, index in list(children.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
                del children[pid]
                exit_code = os.waitstatus_to_exitcode(status)
                if stopping:
                    code = code or max(exit_code, 0)
                elif not announced:
                    log.error(
                        "edge process %d of %d failed to start (exit %d)",
                        index + 1,
                        count,
                        exit_code,
                    )
                    code = exit_code if exit_code > 0 else 1
                    stop_all()
                else:
                    log.warning(
                        "edge process %d of %d (pid %d) ended (%s); starting another",
                        index + 1,
                        count,
                        pid,
                        _exit_text(exit_code),
                    )
                    time.sleep(CHILD_RESTART_SECONDS)
                    if not stopping:
                        spawn(index)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(ready_r)
        os.close(ready_w)
    return code


def _exit_text(exit_code: int) -> str:
    if exit_code < 0:
        return f"killed by {signal.Signals(-exit_code).name}"
    return f"exit {exit_code}"


def _run_child(index: int, child_main: ChildMain, ready_w: int, supervisor: int) -> None:
    """An edge process's whole life: it never returns to the supervisor's code."""
    code = 1
    try:
        _die_with(supervisor)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

        def say_ready() -> None:
            os.write(ready_w, b"r")

        child_main(index, say_ready)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        code = 0
    except BaseException as exc:
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"evalkit: error: edge process {index + 1}: {message}\n")
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


PR_SET_PDEATHSIG = 1


def _die_with(supervisor: int) -> None:
    """Have the kernel kill this process when the supervisor dies (Linux), so that a
    supervisor killed outright leaves no edge process holding the port."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor:  # it died before the line above
        os._exit(1)


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
