"""Where the CLI keeps its login: one token per server URL, in a 0600 file."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

CONFIG_DIR_ENV = "EVALKIT_CLI_CONFIG_DIR"


class StoredLogin(msgspec.Struct, kw_only=True):
    token: str
    username: str
    expires_at: str


class Credentials(msgspec.Struct, kw_only=True):
    default_server: str | None = None
    servers: dict[str, StoredLogin] = msgspec.field(default_factory=dict)


def config_dir() -> Path:
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs  # here: with the variable set (CI, tests), no need for it

    return Path(platformdirs.user_config_dir("evalkit"))


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


def load() -> Credentials:
    path = credentials_path()
    try:
        return msgspec.json.decode(path.read_bytes(), type=Credentials)
    except FileNotFoundError:
        return Credentials()
    except (msgspec.DecodeError, msgspec.ValidationError):
        # A damaged file only costs a new login; say so rather than fail every command.
        return Credentials()


def save(creds: Credentials) -> Path:
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.encode(creds))
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path
