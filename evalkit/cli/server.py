"""``evalkit server``, ``evalkit worker`` and ``evalkit db``: the processes and the schema."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from cyclopts import App, Parameter

from evalkit import __version__
from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, note, say
from evalkit.config import Settings, load_settings, public_url

if TYPE_CHECKING:
    import socket

    # imported inside the commands: alembic and SQLAlchemy take a second and a half to load,
    # which every other CLI command (sync in CI, for one) would pay on each start
    from evalkit import serve

ConfigOpt = Annotated[
    Path | None,
    Parameter(help="config.yaml to read (default: $EVALKIT_CONFIG, else built-in defaults)."),
]
DataDirOpt = Annotated[
    Path | None,
    Parameter(help="Where the embedded PostgreSQL, blobs and keys live (data_dir)."),
]


def _settings(config: Path | None, data_dir: Path | None) -> Settings:
    settings = load_settings(config)
    if data_dir is not None:
        settings.data_dir = str(data_dir)
    return settings


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("procrastinate", "uvicorn.error", "psycopg.pool", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _describe(target: serve.DatabaseTarget, settings: Settings) -> str:
    if target.embedded:
        return f"embedded PostgreSQL in {settings.data_path / 'postgres'}"
    return "the PostgreSQL at database.url"


def server(
    *,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, Parameter(help="Address to listen on (server.host).")] = None,
    port: Annotated[int | None, Parameter(help="Port to listen on (server.port).")] = None,
    processes: Annotated[
        int | None,
        Parameter(
            help="Processes serving the HTTP port (server.processes). Default: one per CPU "
            "core, at most 4; the job worker runs in the first.",
        ),
    ] = None,
    with_worker: Annotated[
        bool | None,
        Parameter(
            negative="--no-worker",
            help="Also run a job worker in this process. Default: yes on the embedded "
            "database (one machine), no with database.url (run `evalkit worker` beside it).",
        ),
    ] = None,
) -> int:
    """Run the evalkit server: HTTP API, collector and web UI.

    With no database.url configured it starts an embedded PostgreSQL under the data
    directory and migrates it; an external database must be at the current schema
    (`evalkit db upgrade`). The first start needs EVALKIT_ADMIN_PASSWORD to create `admin`.
    Every setting can also come from an EVALKIT_* environment variable (docs/config.md).
    """
    settings = _settings(config, data_dir)
    if host is not None:
        settings.server.host = host
    if port is not None:
        settings.server.port = port
    if processes is not None:
        if processes < 0:
            raise CliError("--processes must be 0 (one per CPU core, at most 4) or more")
        settings.server.processes = processes
    from evalkit import serve  # after the arguments and settings are checked: it takes a second

    count = serve.edge_process_count(settings)
    _logging()
    with serve.database_for(settings) as target:
        serve.prepare_schema(target)
        serve.ensure_encryption_key(settings, target)
        worker = target.embedded if with_worker is None else with_worker
        announce = _announcer(settings, target, worker, count)
        if count > 1:
            return _serve_in_processes(settings, target, worker, count, announce)
        serve.check_port_free(settings.server.host, settings.server.port)
        serve.run_event_loop(_serve(settings, target, worker, announce))
    return 0


def _announcer(
    settings: Settings, target: serve.DatabaseTarget, with_worker: bool, count: int
) -> Callable[[], None]:
    def announce() -> None:
        worker = " with a worker" if with_worker else ""
        processes = f" in {count} processes" if count > 1 else ""
        note(
            f"evalkit {__version__} serving on {public_url(settings)}{worker}{processes} "
            f"({_describe(target, settings)}); Ctrl-C stops it"
        )

    return announce


def _serve_in_processes(
    settings: Settings,
    target: serve.DatabaseTarget,
    with_worker: bool,
    count: int,
    announce: Callable[[], None],
) -> int:
    """The edge in ``count`` forked processes that accept from one listening socket; the
    job worker, when there is one, in the first. The edge's modules are imported before the
    fork, so that every process shares them and starts at once."""
    from evalkit import serve
    from evalkit.edge import app as _edge_app  # noqa: F401

    listener = serve.listening_socket(settings.server.host, settings.server.port)
    clients = serve.Clients(count)

    def child_main(index: int, ready: Callable[[], None]) -> None:
        serve.run_event_loop(
            _serve(
                settings,
                target,
                with_worker and index == 0,
                ready,
                listener=listener,
                balance=clients.process(index),
            )
        )

    try:
        serve.run_event_loop(serve.ensure_admin_at(target.url))
        return serve.serve_in_processes(count, child_main, announce)
    finally:
        listener.close()


async def _serve(
    settings: Settings,
    target: serve.DatabaseTarget,
    with_worker: bool,
    announce: Callable[[], None],
    *,
    listener: socket.socket | None = None,
    balance: serve.Balance | None = None,
) -> None:
    from evalkit import serve

    ready = asyncio.Event()

    async def when_ready() -> None:
        await ready.wait()
        serve.tune_gc_for_serving()
        announce()

    announcer = asyncio.create_task(when_ready())
    try:
        await serve.run(
            settings,
            target.url,
            edge=True,
            worker=with_worker,
            announce=ready,
            listener=listener,
            balance=balance,
        )
    finally:
        announcer.cancel()


def worker(
    *,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    concurrency: Annotated[
        int | None, Parameter(help="Jobs run at once in this process (worker.concurrency).")
    ] = None,
) -> int:
    """Run a job worker: it drives runs, collects trajectories and scores them.

    Run as many as you like against one database; each job runs once.
    """
    from evalkit import serve

    settings = _settings(config, data_dir)
    if concurrency is not None:
        settings.worker.concurrency = concurrency
    _logging()
    with serve.database_for(settings) as target:
        serve.prepare_schema(target)
        serve.ensure_encryption_key(settings, target)
        note(
            f"evalkit worker {__version__} running ({_describe(target, settings)}); Ctrl-C stops it"
        )
        serve.run_event_loop(serve.run(settings, target.url, edge=False, worker=True))
    return 0


db = App(name="db", help="The database schema: status and migrations.")


@db.command(name="upgrade")
def db_upgrade(
    *, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonFlag = False
) -> int:
    """Apply pending migrations (run before starting a new server version)."""
    from evalkit import serve
    from evalkit.sql import migrate

    settings = _settings(config, data_dir)
    with serve.database_for(settings) as target:
        before, after = migrate.upgrade(target.url)
    if json:
        emit_json({"before": before, "after": after, "changed": before != after})
    elif before == after:
        say(f"database already at revision {after}")
    else:
        say(f"database migrated from {before or 'empty'} to {after}")
    return 0


@db.command(name="status")
def db_status(
    *, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonFlag = False
) -> int:
    """Show the database's schema revision and the one this evalkit needs; exit 1 if behind."""
    from evalkit import serve
    from evalkit.sql import migrate

    settings = _settings(config, data_dir)
    with serve.database_for(settings) as target:
        current = migrate.current_revision(target.url)
    head = migrate.head_revision()
    if json:
        emit_json({"current": current, "head": head, "up_to_date": current == head})
    else:
        state = "up to date" if current == head else "behind: run `evalkit db upgrade`"
        say(f"database at {current or 'empty'}, this evalkit needs {head}: {state}")
    return 0 if current == head else 1
