"""``evalkit init-server``: a config.yaml, a migrated database and an admin, in one step.

After it, ``evalkit server --config PATH`` starts with nothing else to set: the file holds
the data dir, the database (embedded unless ``--database-url``) and a generated
``encryption_key``; the admin exists, so no ``EVALKIT_ADMIN_PASSWORD`` is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import yaml
from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, note, say
from evalkit.config import Settings, default_data_dir
from evalkit.errors import EvalkitError

DEFAULT_CONFIG = Path("config.yaml")
ADMIN_USERNAME = "admin"
KEY_FILE = "encryption.key"

HEADER = """\
# evalkit server configuration, written by `evalkit init-server` on {date}.
# Start the server with: evalkit server --config {path}
# Every key, its default and its EVALKIT_* environment variable: docs/config.md.
# encryption_key encrypts the agent, evaluator and LLM provider keys stored in the database.
# Back it up with the database: secrets stored under one key do not decrypt under another.
"""


@dataclass
class _Plan:
    config: Path
    data_dir: Path
    database_url: str | None
    encryption_key: str
    key_source: str
    admin_password: str | None
    password_from: str | None


def init_server(
    *,
    config: Annotated[
        Path,
        Parameter(help="Where to write the server's config file (refused if it exists)."),
    ] = DEFAULT_CONFIG,
    data_dir: Annotated[
        Path | None,
        Parameter(
            help="Where the embedded PostgreSQL, file blobs and keys live (default: your user "
            "data directory). Written into the config as an absolute path."
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        Parameter(
            help="A PostgreSQL URL (postgresql://user:password@host/db) to migrate and use "
            "instead of the embedded database. The database must exist."
        ),
    ] = None,
    admin_password_env: Annotated[
        str | None,
        Parameter(
            help="Name of an environment variable holding the admin's password (8 to 72 "
            "bytes). Without it a password is generated and printed once."
        ),
    ] = None,
    force: Annotated[
        bool,
        Parameter(
            help="Overwrite an existing config file. Its encryption_key is kept, so secrets "
            "already stored under it still decrypt."
        ),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Set up a server: write config.yaml, set up and migrate its database, create the admin.

    The config file (mode 0600) gets the data directory, the database URL when one is
    given, and a generated encryption_key (or the one already kept in the data directory).
    The embedded PostgreSQL is started, migrated and stopped again; an external database
    (--database-url) is migrated. The user `admin` is created with the password from the
    variable --admin-password-env names, or a generated one printed once. An admin that
    already exists is kept as it is. Then `evalkit server --config PATH` starts with no
    other setting. See docs/deploy.md.
    """
    plan = _plan(config, data_dir, database_url, admin_password_env, force)
    try:
        before, after, created = _set_up_database(plan)
    except EvalkitError as exc:
        raise CliError(f"{exc.message} (nothing was written to {plan.config})") from None
    _write_config(plan)
    if plan.database_url is None:
        _keep_key_in_data_dir(plan)
    _report(plan, before, after, created, json)
    return 0


def _plan(
    config: Path,
    data_dir: Path | None,
    database_url: str | None,
    password_env: str | None,
    force: bool,
) -> _Plan:
    """Every refusal happens here, before anything is started or written."""
    config = config.expanduser().absolute()
    if config.is_dir():
        raise CliError(f"{config} is a directory; pass --config with a file path")
    if config.exists() and not force:
        raise CliError(
            f"{config} already exists; pass --force to overwrite it (its encryption_key is "
            "kept), or --config with another path"
        )
    if not config.parent.is_dir():
        raise CliError(f"the directory of {config} does not exist; create it first")
    if database_url is not None and not database_url.startswith(("postgresql://", "postgres://")):
        raise CliError(
            "--database-url must be a PostgreSQL URL such as "
            "postgresql://evalkit:secret@db.internal:5432/evalkit"
        )
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise CliError(
                f"--admin-password-env names {password_env}, which is not set or empty; set "
                "it to the admin's password, or leave the flag out to get a generated one"
            )
        from evalkit.auth import passwords

        try:
            passwords.check_password_rules(password, what=password_env)
        except EvalkitError as exc:
            raise CliError(exc.message) from None
    data = (data_dir.expanduser() if data_dir else default_data_dir()).absolute()
    key, source = _encryption_key(config if force else None, data, database_url is None)
    return _Plan(config, data, database_url, key, source, password, password_env)


def _encryption_key(old_config: Path | None, data_dir: Path, embedded: bool) -> tuple[str, str]:
    """The key the old config file had (with --force), else the one the embedded server
    keeps in the data dir, else a new one; and where it came from."""
    from evalkit.auth.secrets import generate_key

    if old_config is not None and old_config.exists():
        with contextlib.suppress(OSError, yaml.YAMLError):
            old = yaml.safe_load(old_config.read_text())
            if isinstance(old, dict) and isinstance(old.get("encryption_key"), str):
                return old["encryption_key"], f"kept from the old {old_config.name}"
    key_file = data_dir / KEY_FILE
    if embedded and key_file.is_file():
        return key_file.read_text().strip(), f"kept from {key_file}"
    return generate_key(), "generated"


def _settings(plan: _Plan) -> Settings:
    settings = Settings(data_dir=str(plan.data_dir), encryption_key=plan.encryption_key)
    settings.database.url = plan.database_url
    settings.database.pool_min, settings.database.pool_max = 1, 2
    return settings


def _set_up_database(plan: _Plan) -> tuple[str | None, str, bool]:
    """(revision before, revision after, admin created now)."""
    from evalkit import serve
    from evalkit.sql import migrate

    settings = _settings(plan)
    where = (
        f"the embedded PostgreSQL in {plan.data_dir / 'postgres'}"
        if plan.database_url is None
        else "the database at --database-url"
    )
    note(f"setting up {where}")
    with serve.database_for(settings) as target:
        before, after = migrate.upgrade(target.url)
        created = asyncio.run(_ensure_admin(target.url, plan))
    return before, after, created


async def _ensure_admin(url: str, plan: _Plan) -> bool:
    from evalkit.auth import passwords
    from evalkit.db import Database
    from evalkit.store import accounts

    db = Database(url, min_size=1, max_size=1)
    await db.open()
    try:
        async with db.transaction() as conn:
            if await accounts.admin_exists(conn):
                plan.admin_password = None
                return False
            if plan.admin_password is None:
                plan.admin_password = passwords.generate_password()
            await accounts.create_user(conn, ADMIN_USERNAME, plan.admin_password, is_admin=True)
            return True
    finally:
        await db.close()


def _config_text(plan: _Plan) -> str:
    body: dict[str, Any] = {"data_dir": str(plan.data_dir), "encryption_key": plan.encryption_key}
    if plan.database_url is not None:
        body["database"] = {"url": plan.database_url}
    defaults = Settings().server
    body["server"] = {"host": defaults.host, "port": defaults.port}
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    header = HEADER.format(date=date, path=plan.config)
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def _write_config(plan: _Plan) -> None:
    """Written whole or not at all: a 0600 temporary file beside it, then renamed."""
    temp = plan.config.with_name(f".{plan.config.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_config_text(plan))
        os.replace(temp, plan.config)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _keep_key_in_data_dir(plan: _Plan) -> None:
    """`evalkit server --data-dir DIR` without the config then uses the same key."""
    key_file = plan.data_dir / KEY_FILE
    if key_file.exists():
        return
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(plan.encryption_key)


def _report(plan: _Plan, before: str | None, after: str, created: bool, json: bool) -> None:
    start = f"evalkit server --config {plan.config}"
    generated = created and plan.password_from is None
    if json:
        emit_json(
            {
                "config": str(plan.config),
                "data_dir": str(plan.data_dir),
                "database": "embedded" if plan.database_url is None else "external",
                "schema": {"before": before, "after": after},
                "encryption_key": plan.key_source,
                "admin": {
                    "username": ADMIN_USERNAME,
                    "created": created,
                    "password": plan.admin_password if generated else None,
                    "password_from": plan.password_from if created else None,
                },
                "start": start,
            }
        )
        return
    say(f"wrote {plan.config} (readable only by you); encryption_key {plan.key_source}")
    if before == after:
        say(f"database already at revision {after}")
    else:
        say(f"database migrated from {before or 'empty'} to {after}")
    if not created:
        say("an admin already exists in this database; kept it as it is")
    elif generated:
        say(f"created admin user '{ADMIN_USERNAME}'; its password (shown once, not stored):")
        say(f"  {plan.admin_password}")
    else:
        say(f"created admin user '{ADMIN_USERNAME}' with the password from {plan.password_from}")
    say(f"start the server: {start}")
