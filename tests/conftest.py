"""Test fixtures: one PostgreSQL for the session, a fresh database per test cloned from a
migrated template, the edge on a loopback port, and the real CLI run in-process."""

from __future__ import annotations

import io
import itertools
import os
import queue
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from argon2 import PasswordHasher

from evalkit.auth import passwords
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.embedded import EmbeddedPostgres
from evalkit.sql import migrate

TEST_DATABASE_ENV = "EVALKIT_TEST_DATABASE_URL"
TEMPLATE = "evalkit_template"
ADMIN_PASSWORD = "admin-password-1"

# argon2id at the library's recommended cost takes 0.12 s of both cores a hash or a check,
# and nearly every test creates the admin and logs in: the tests' own servers run the same
# code with argon2id's cheapest parameters. Servers started as processes keep the real ones
# (tests/security/test_password_hashing.py checks those).
passwords.use_hasher(PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def docker_engine_reachable() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A PostgreSQL where tests may create databases: $EVALKIT_TEST_DATABASE_URL, else a
    testcontainers PostgreSQL when a Docker engine answers, else an embedded cluster."""
    external = os.environ.get(TEST_DATABASE_ENV)
    if external:
        yield external
        return
    if docker_engine_reachable():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer("postgres:17", driver=None) as container:
            yield container.get_connection_url()
        return
    # Not under pytest's basetemp: pytest prunes old basetemps, which would pull the data
    # directory from under a cluster that a concurrent test session still uses.
    cluster = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="evalkit-test-pg-")), cleanup="delete")
    cluster.start()
    try:
        yield cluster.admin_url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def template_url(pg_admin_url: str) -> str:
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    url = with_database(pg_admin_url, TEMPLATE)
    migrate.upgrade(url)
    return url


_db_counter = itertools.count()


def _new_name() -> str:
    return f"evalkit_test_{os.getpid()}_{next(_db_counter)}"


class DatabasePool:
    """Migrated databases cloned ahead of the tests that take them, and dropped behind
    them, on two threads: a clone costs about 0.1 s and a drop 0.05 s, which the tests' own
    waits on servers and subprocesses hide. A failed clone or drop is raised in the next
    test that takes a database."""

    def __init__(self, admin_url: str, ready: int = 2) -> None:
        self._admin_url = admin_url
        self._ready: queue.Queue[str] = queue.Queue(maxsize=ready)
        self._to_drop: queue.Queue[str | None] = queue.Queue()
        self._closing = threading.Event()
        self._error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._clone,), daemon=True),
            threading.Thread(target=self._guarded, args=(self._drop,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def take(self) -> str:
        while True:
            if self._error is not None:
                raise RuntimeError(f"the test database pool failed: {self._error!r}")
            try:
                return self._ready.get(timeout=1)
            except queue.Empty:
                continue

    def give_back(self, name: str) -> None:
        self._to_drop.put(name)

    def close(self) -> None:
        self._closing.set()
        self._drop_the_ready()
        self._threads[0].join(timeout=30)
        self._drop_the_ready()  # a clone that finished while the first thread was stopping
        self._to_drop.put(None)
        self._threads[1].join(timeout=60)

    def _drop_the_ready(self) -> None:
        while True:
            try:
                self._to_drop.put(self._ready.get_nowait())
            except queue.Empty:
                return

    def _guarded(self, loop: Callable[[psycopg.Connection], None]) -> None:
        try:
            with psycopg.connect(self._admin_url, autocommit=True) as conn:
                loop(conn)
        except BaseException as exc:  # handed to the next test that takes a database
            self._error = exc

    def _clone(self, conn: psycopg.Connection) -> None:
        while not self._closing.is_set():
            name = _new_name()
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
            while True:
                try:
                    self._ready.put(name, timeout=0.5)
                    break
                except queue.Full:
                    if self._closing.is_set():
                        self._to_drop.put(name)
                        return

    def _drop(self, conn: psycopg.Connection) -> None:
        while (name := self._to_drop.get()) is not None:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def database_pool(template_url: str, pg_admin_url: str) -> Iterator[DatabasePool]:
    pool = DatabasePool(pg_admin_url)
    yield pool
    pool.close()


@pytest.fixture
def new_database(pg_admin_url: str, database_pool: DatabasePool) -> Iterator[callable]:
    """Factory: a new database, migrated (``template=True``) or empty."""
    taken: list[str] = []
    created: list[str] = []

    def make(template: bool = True) -> str:
        if template:
            name = database_pool.take()
            taken.append(name)
        else:
            name = _new_name()
            with psycopg.connect(pg_admin_url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            created.append(name)
        return with_database(pg_admin_url, name)

    yield make
    for name in taken:
        database_pool.give_back(name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in created:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(new_database: callable) -> str:
    return new_database()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """evalkit's connection pool, open on the test's database."""
    database = Database(database_url)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


def free_port() -> int:
    from evalkit.serve import free_port as pick

    return pick()


@dataclass
class RunningServer:
    """A ThreadedServer plus the database it serves, for tests."""

    url: str
    db_url: str
    settings: Settings
    _server: object

    def stop(self) -> None:
        self._server.stop()  # type: ignore[attr-defined]


def start_server(
    db_url: str,
    tmp_path: Path,
    *,
    worker: bool = False,
    configure: Callable[[Settings], None] | None = None,
    **auth: object,
) -> RunningServer:
    """A real edge (and worker) in a thread; ``configure`` edits the settings first."""
    from evalkit.auth.secrets import generate_key
    from evalkit.serve import ThreadedServer

    settings = Settings(data_dir=str(tmp_path / "data"), encryption_key=generate_key())
    settings.server.port = free_port()
    for key, value in auth.items():
        setattr(settings.auth, key, value)
    if configure is not None:
        configure(settings)
    running = ThreadedServer(
        settings, db_url, worker=worker, env={"EVALKIT_ADMIN_PASSWORD": ADMIN_PASSWORD}
    )
    return RunningServer(running.url, db_url, settings, running)


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def json(self) -> object:
        import json

        return json.loads(self.out)


class Cli:
    """Runs ``evalkit`` in-process as a user would type it; ``token`` picks who is logged in."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str, stdin: str = "", token: str | None = None) -> CliResult:
        from evalkit.cli.app import run

        self.capsys.readouterr()
        if token is not None:
            self.monkeypatch.setenv("EVALKIT_TOKEN", token)
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = run(list(args))
        finally:
            if token is not None:
                self.monkeypatch.delenv("EVALKIT_TOKEN")
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    monkeypatch.setenv("EVALKIT_CLI_CONFIG_DIR", str(tmp_path / "cli-config"))
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("EVALKIT_TOKEN", "EVALKIT_SERVER_URL", "EVALKIT_PASSWORD", "EVALKIT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return Cli(capsys, monkeypatch)


@pytest.fixture
def api_login(server: RunningServer) -> callable:
    """Factory: a bearer token for a username and password, through the real login route."""
    import httpx

    def login(username: str, password: str) -> str:
        response = httpx.post(
            f"{server.url}/api/auth/login", json={"username": username, "password": password}
        )
        assert response.status_code == 200, response.text
        return response.json()["token"]

    return login


@pytest.fixture
def admin_token(api_login: callable) -> str:
    return api_login("admin", ADMIN_PASSWORD)
