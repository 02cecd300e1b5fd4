"""Server configuration: ``config.yaml`` plus ``EVALKIT_*`` environment overrides.

One typed :class:`Settings` holds every key. The file is optional; every key has a default
except where a deployment must choose (``encryption_key`` is generated for the embedded
default and required with an external database). An environment variable overrides a key
by its dotted path in upper case with dots as underscores: ``auth.token_ttl_hours`` is
``EVALKIT_AUTH_TOKEN_TTL_HOURS``.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Annotated, Any

import msgspec
import platformdirs
import yaml

from evalkit.errors import ConfigError

CONFIG_ENV = "EVALKIT_CONFIG"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("evalkit"))


class DatabaseSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str | None = None
    """A libpq URL; unset means an embedded PostgreSQL under ``data_dir``."""
    pool_min: int = 1
    pool_max: int = 10


class ServerSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8600
    processes: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Edge processes serving the port (``evalkit server``); 0: one per CPU core, up to 4."""
    public_url: str | None = None
    """The URL users reach the server at; defaults to http://host:port."""
    cli_wheel_dir: str | None = None
    """Where the CLI wheel served at /cli lies; unset: built from a source checkout."""


class OidcSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    issuer: str
    client_id: str
    client_secret: str | None = None
    scopes: list[str] = msgspec.field(default_factory=lambda: ["openid", "profile", "email"])
    username_claim: str = "preferred_username"
    audience: str | None = None
    """The ``aud`` that access tokens of machine clients must carry; default: client_id."""


class AuthSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    token_ttl_hours: int = 24 * 7
    oidc: OidcSettings | None = None


class OtelSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    settle_seconds: float = 5.0
    max_batch_bytes: int = 16 * 2**20
    max_session_bytes: int = 64 * 2**20
    retention_days: int = 30
    orphan_seconds: float = 300.0
    """A trace whose root span has not arrived after this long without a new span takes the
    session one of its spans names (or is listed as an orphan trace)."""


class EgressSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    allow_private: bool = False
    """Allow outbound calls to loopback, link-local and private addresses."""
    allowed_prefixes: list[str] = msgspec.field(default_factory=list)
    """URL prefixes that are always allowed, private or not."""


class WorkerSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    concurrency: int = 8
    """Jobs one worker runs at the same time."""
    harness_timeout_seconds: float = 30.0
    """How long one call to a harness may take before it counts as a failed attempt."""
    harness_attempts: int = 5
    """Attempts of one harness call (connection errors, timeouts, 5xx) before the run errors."""
    retry_backoff_seconds: float = 1.0
    """Wait before the second attempt; it doubles each time, up to 60 seconds."""
    stalled_seconds: float = 60.0
    """How long PostgreSQL waits for a worker's machine that stopped answering before it
    drops the worker's liveness lock (a killed process loses it at once), and how long a
    worker may go without its lock before it starts again as a new worker."""
    job_poll_seconds: float = 0.5
    """How often an idle worker looks for jobs that became due (a run's next poll, a
    retry's backoff); new jobs wake it at once."""


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    data_dir: str | None = None
    blob_url: str | None = None
    """file:///path or gs://bucket/prefix; default: file://<data_dir>/blobs."""
    max_fixture_bytes: int = 50 * 2**20
    """The largest fixture file the server accepts (413 above it)."""
    encryption_key: str | None = None
    """32 random bytes, base64; encrypts agent, evaluator and provider keys at rest."""
    database: DatabaseSettings = msgspec.field(default_factory=DatabaseSettings)
    server: ServerSettings = msgspec.field(default_factory=ServerSettings)
    auth: AuthSettings = msgspec.field(default_factory=AuthSettings)
    otel: OtelSettings = msgspec.field(default_factory=OtelSettings)
    egress: EgressSettings = msgspec.field(default_factory=EgressSettings)
    worker: WorkerSettings = msgspec.field(default_factory=WorkerSettings)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()

    @property
    def resolved_blob_url(self) -> str:
        return self.blob_url or (self.data_path / "blobs").as_uri()


def public_url(settings: Settings) -> str:
    """The server's base URL as users and harnesses reach it: ``server.public_url``, else
    the address it listens on."""
    if settings.server.public_url:
        return settings.server.public_url.rstrip("/")
    host = settings.server.host
    return f"http://{'[' + host + ']' if ':' in host else host}:{settings.server.port}"


_RETIRED_KEYS = {
    ("mcp", "oauth"): (
        "'mcp.oauth' is no longer read: move the issuer, client id and secret to 'auth.oidc' "
        "(issuer, client_id, client_secret) and remove the 'mcp' section"
    ),
}


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read ``path`` (or ``$EVALKIT_CONFIG``) and apply ``EVALKIT_*`` overrides."""
    env = dict(os.environ if env is None else env)
    path = path or env.get(CONFIG_ENV)
    raw: dict[str, Any] = _read_yaml(Path(path)) if path else {}
    source = str(path) if path else "the configuration"
    _refuse_retired_keys(raw, source)
    _apply_env(raw, env)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_explain(exc)}") from None


def env_var_names() -> dict[str, str]:
    """Every overridable key, dotted path -> environment variable."""
    return {".".join(p): _env_name(p) for p in _leaf_paths(Settings)}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(
            f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)}); fix the syntax"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not a list or value")
    return data


def _refuse_retired_keys(raw: dict[str, Any], source: str) -> None:
    for (section, key), message in _RETIRED_KEYS.items():
        block = raw.get(section)
        if isinstance(block, dict) and key in block:
            raise ConfigError(f"{source}: {message}")


def _leaf_paths(
    struct: type[msgspec.Struct], prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for field in msgspec.structs.fields(struct):
        sub = _struct_in(field.type)
        if sub is not None:
            paths.extend(_leaf_paths(sub, (*prefix, field.name)))
        else:
            paths.append((*prefix, field.name))
    return paths


def _struct_in(annotation: Any) -> type[msgspec.Struct] | None:
    """The Struct type of a field typed ``S`` or ``S | None``, else None."""
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            return candidate
    return None


def _env_name(path: tuple[str, ...]) -> str:
    return "EVALKIT_" + "_".join(path).upper()


def _apply_env(raw: dict[str, Any], env: dict[str, str]) -> None:
    for path in _leaf_paths(Settings):
        value = env.get(_env_name(path))
        if value is None:
            continue
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = _env_value(value)


def _env_value(value: str) -> Any:
    """Env values are strings; YAML-parse lists and booleans so ``[a, b]`` and ``true`` work."""
    if value.startswith("[") or value.lower() in ("true", "false"):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


def _explain(exc: msgspec.ValidationError) -> str:
    message = str(exc)
    if message.startswith("Object contains unknown field"):
        # msgspec: "Object contains unknown field `x` - at `$.auth`"
        field, _, where = message.partition(" - at ")
        key = field.split("`")[1]
        section = where.strip("`").removeprefix("$").lstrip(".")
        dotted = f"{section}.{key}" if section else key
        return f"unknown key '{dotted}'; remove it or check its spelling (see docs/config.md)"
    message = message.replace(" - at `$.", " at '").replace(" - at `$`", "")
    if message.endswith("`"):
        message = message[:-1] + "'"
    return message + "; fix the value (see docs/config.md)"
