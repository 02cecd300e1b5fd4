"""Agents: their run settings, encrypted API keys and span mappings.

The key is SecretBox text bound to the agent's id (:func:`key_context`), so a ciphertext
copied to another agent's row does not decrypt; no function here returns it except
:func:`agent_api_key`, which the run engine calls to drive a harness.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET

from evalkit.auth.access import Actor, WorkspaceFacts
from evalkit.auth.secrets import SecretBox
from evalkit.db import Conn
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import agents as wire
from evalkit.model.harness import PROVIDES
from evalkit.model.names import check_name
from evalkit.otel.mapping import validate_mapping
from evalkit.store.workspaces import WorkspaceRow

_json = msgspec.json.Encoder()

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_URL_LENGTH = 2048
MAX_API_KEY_LENGTH = 8192
MAX_MAPPING_ERRORS_SHOWN = 20


def key_context(agent_id: int) -> str:
    """The associated data of an agent's key: its id, which no edit changes."""
    return f"agent-api-key:{agent_id}"


@dataclass(frozen=True, slots=True)
class AgentRow:
    """An agent as the run engine and the routes see it; never holds the key."""

    id: int
    workspace_id: int
    workspace: str
    workspace_kind: str
    owner_id: int | None
    name: str
    harness_url: str | None
    api_key_env: str | None
    has_api_key: bool
    trajectory_source: str
    max_concurrent_runs: int
    run_timeout: float
    poll_interval: float
    stop_grace: float
    trajectory_wait: float
    provides: dict[str, bool]
    mapping_version: int | None
    created_at: datetime
    created_by: str | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AgentRow:
        return cls(
            id=row["id"],
            workspace_id=row["workspace_id"],
            workspace=row["workspace"],
            workspace_kind=row["workspace_kind"],
            owner_id=row["owner_id"],
            name=row["name"],
            harness_url=row["harness_url"],
            api_key_env=row["api_key_env"],
            has_api_key=row["has_api_key"],
            trajectory_source=row["trajectory_source"],
            max_concurrent_runs=row["max_concurrent_runs"],
            run_timeout=row["run_timeout_seconds"],
            poll_interval=row["poll_interval_seconds"],
            stop_grace=row["stop_grace_seconds"],
            trajectory_wait=row["trajectory_wait_seconds"],
            provides=dict(row["provides"]),
            mapping_version=row["mapping_version"],
            created_at=row["created_at"],
            created_by=row["created_by"],
            updated_at=row["updated_at"],
        )

    @property
    def kind(self) -> str:
        """``harness`` when evalkit calls a harness URL, ``code`` when the SDK reports runs."""
        return "harness" if self.harness_url else "code"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.workspace}"

    @property
    def workspace_facts(self) -> WorkspaceFacts:
        """The agent's workspace for :func:`evalkit.auth.access.require_run_agent`."""
        return WorkspaceFacts(
            name=self.workspace,
            kind=self.workspace_kind,  # type: ignore[arg-type]
            owner_id=self.owner_id,
        )

    def to_api(self) -> wire.Agent:
        return wire.Agent(
            workspace=self.workspace,
            name=self.name,
            kind=self.kind,  # type: ignore[arg-type]
            harness_url=self.harness_url,
            has_api_key=self.has_api_key,
            api_key_env=self.api_key_env,
            trajectory_source=self.trajectory_source,  # type: ignore[arg-type]
            max_concurrent_runs=self.max_concurrent_runs,
            run_timeout=self.run_timeout,
            poll_interval=self.poll_interval,
            stop_grace=self.stop_grace,
            trajectory_wait=self.trajectory_wait,
            provides=self.provides,
            mapping_version=self.mapping_version,
            created_at=self.created_at,
            created_by=self.created_by,
            updated_at=self.updated_at,
        )


# --------------------------------------------------------------------------- reading


def _no_agent(name: str, workspace: str) -> NotFound:
    return NotFound(
        f"no agent {name}@{workspace}; see `evalkit agents list --workspace {workspace}`",
        code="no-such-agent",
    )


async def get_agent(conn: Conn, workspace_id: int, name: str) -> AgentRow:
    row = await conn.one("agent_get_by_name", workspace_id=workspace_id, name=name)
    if row is None:
        raise NotFound(f"no workspace with id {workspace_id}", code="no-such-workspace")
    if row["id"] is None:
        raise _no_agent(name, row["workspace"])
    return AgentRow.from_row(row)


async def get_agent_by_id(conn: Conn, agent_id: int) -> AgentRow:
    row = await conn.one("agent_get_by_id", id=agent_id)
    if row is None:
        raise NotFound(
            f"no agent with id {agent_id} (was it deleted?); see `evalkit agents list`",
            code="no-such-agent",
        )
    return AgentRow.from_row(row)


async def list_agents(conn: Conn, ws: WorkspaceRow | None) -> list[wire.Agent]:
    rows = await conn.all("agent_list", workspace_id=ws.id if ws else None)
    return [AgentRow.from_row(row).to_api() for row in rows]


async def agent_api_key(conn: Conn, agent_id: int, box: SecretBox) -> str | None:
    """The agent's key in clear, for the harness's Authorization header; None without one."""
    row = await conn.one("agent_get_api_key", id=agent_id)
    if row is None:
        raise NotFound(f"no agent with id {agent_id} (was it deleted?)", code="no-such-agent")
    stored = row["api_key"]
    return None if stored is None else box.decrypt(stored, key_context(agent_id))


async def active_mapping(conn: Conn, agent_id: int) -> tuple[int, dict[str, Any]] | None:
    """The agent's active span mapping as (version, body), or None."""
    row = await conn.one("span_mapping_get_active", agent_id=agent_id)
    return None if row is None else (row["version"], row["body"])


# --------------------------------------------------------------------------- rules


@dataclass
class _Settings:
    """What an agent will look like once a create or an edit is applied."""

    harness_url: str | None
    api_key_env: str | None
    trajectory_source: str
    max_concurrent_runs: int
    run_timeout: float
    poll_interval: float
    stop_grace: float
    trajectory_wait: float
    provides: dict[str, bool]


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() for c in url)
        or len(url) > MAX_URL_LENGTH
    ):
        raise BadRequest(
            f"harness_url {url!r} is not an http(s) URL with a host (e.g. "
            "https://harness.example.com or http://localhost:8700)",
            code="bad-harness-url",
        )
    if parts.username is not None or parts.password is not None:
        # As for LLM providers and remote evaluators (judges.check_base_url): the URL is
        # shown to everyone logged in, so a password in it would be a secret in the open.
        raise BadRequest(
            "harness_url has credentials in it (user:password@); everyone logged in sees the "
            "URL, so give the key with --api-key-env (the API's api_key) instead",
            code="bad-harness-url",
        )


def check_api_key(key: str) -> None:
    """A key sent to be stored encrypted (agents, LLM providers, remote evaluators)."""
    if not key.strip():
        raise BadRequest("api_key is empty; send the key, or leave it out", code="bad-api-key")
    if len(key) > MAX_API_KEY_LENGTH:
        raise BadRequest(
            f"api_key is {len(key)} characters; the most is {MAX_API_KEY_LENGTH}",
            code="bad-api-key",
        )


def check_env_name(name: str) -> None:
    if not ENV_NAME_RE.match(name):
        raise BadRequest(
            f"api_key_env {name!r} is not an environment variable name (letters, digits and "
            "'_', not starting with a digit)",
            code="bad-api-key-env",
        )


def check_mapping(mapping: dict[str, Any]) -> None:
    """Refuse a span mapping that breaks a rule of the format, naming every problem."""
    errors = validate_mapping(mapping)
    if not errors:
        return
    shown = "; ".join(str(e) for e in errors[:MAX_MAPPING_ERRORS_SHOWN])
    more = len(errors) - MAX_MAPPING_ERRORS_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    count = f"{len(errors)} problem{'s' if len(errors) != 1 else ''}"
    raise BadRequest(
        f"the span mapping has {count}: {shown}{tail} (the format: docs/tracing.md; a "
        "starting point: `evalkit agents mapping starter openinference|genai|vercel-ai|auto`)",
        code="bad-mapping",
    )


def _check_provides(provides: dict[str, bool]) -> None:
    unknown = sorted(set(provides) - set(PROVIDES))
    if unknown:
        raise BadRequest(
            f"provides has unknown key(s) {', '.join(unknown)}; the keys are {', '.join(PROVIDES)}",
            code="bad-provides",
        )


def _check_seconds(name: str, value: float, *, zero_ok: bool) -> None:
    bad = not math.isfinite(value) or (value < 0 if zero_ok else value <= 0)
    if bad:
        floor = "0 or more" if zero_ok else "more than 0"
        raise BadRequest(f"{name} must be {floor} seconds, not {value}", code="bad-agent-setting")


def _check_settings(s: _Settings, *, has_key: bool, has_mapping: bool) -> None:
    """The rules on an agent's final state, mirroring the CHECK constraints of ``agents``."""
    lo, hi = 1, wire.MAX_CONCURRENT_RUNS_LIMIT
    if not lo <= s.max_concurrent_runs <= hi:
        raise BadRequest(
            f"max_concurrent_runs must be between {lo} and {hi}, not {s.max_concurrent_runs}",
            code="bad-agent-setting",
        )
    _check_seconds("run_timeout", s.run_timeout, zero_ok=False)
    _check_seconds("poll_interval", s.poll_interval, zero_ok=False)
    _check_seconds("stop_grace", s.stop_grace, zero_ok=True)
    _check_seconds("trajectory_wait", s.trajectory_wait, zero_ok=True)
    _check_provides(s.provides)
    if s.harness_url is None:
        if has_key or s.api_key_env is not None:
            raise BadRequest(
                "an API key is sent to a harness, and a code-driven agent (no harness_url) "
                "has none: drop the key (--api-key-env), or give a harness URL",
                code="key-without-harness",
            )
        if s.trajectory_source == "harness":
            raise BadRequest(
                "trajectory_source harness needs a harness_url: a code-driven agent's "
                "trajectories come from its traces (trajectory_source otel, with a span "
                "mapping) or from the SDK",
                code="harness-source-without-url",
            )
    else:
        _check_url(s.harness_url)
    if s.api_key_env is not None:
        check_env_name(s.api_key_env)
    if s.trajectory_source == "otel" and not has_mapping:
        raise BadRequest(
            "trajectory_source otel needs a span mapping: pass --mapping FILE (a JSON object "
            "saying where the session id, answer and messages live in the spans)",
            code="mapping-required",
        )


# --------------------------------------------------------------------------- writing


async def create_agent(
    conn: Conn,
    actor: Actor,
    ws: WorkspaceRow,
    body: wire.AgentCreate,
    box: SecretBox | None,
) -> wire.Agent:
    """Create an agent; ``box`` encrypts ``body.api_key`` (needed only when one is given)."""
    check_name("agent", body.name)
    source = body.trajectory_source or ("harness" if body.harness_url else "otel")
    settings = _Settings(
        harness_url=body.harness_url,
        api_key_env=body.api_key_env,
        trajectory_source=source,
        max_concurrent_runs=body.max_concurrent_runs,
        run_timeout=body.run_timeout,
        poll_interval=body.poll_interval,
        stop_grace=body.stop_grace,
        trajectory_wait=body.trajectory_wait,
        provides=body.provides,
    )
    if body.api_key is not None:
        check_api_key(body.api_key)
    if body.mapping is not None:
        check_mapping(body.mapping)
    elif body.harness_url is None and body.trajectory_source is None:
        raise BadRequest(
            "a code-driven agent (no harness_url) takes its trajectories from its traces, "
            "which needs a span mapping: pass --mapping FILE (a JSON object saying where the "
            "session id, answer and messages live in the spans), or give a harness URL",
            code="mapping-required",
        )
    _check_settings(
        settings, has_key=body.api_key is not None, has_mapping=body.mapping is not None
    )
    row = await conn.one(
        "agent_insert",
        workspace_id=ws.id,
        name=body.name,
        actor_id=actor.user_id,
        **_columns(settings),
    )
    if row is None:
        ref = f"{body.name}@{ws.facts.name}"
        raise Conflict(
            f"agent {ref} already exists; see `evalkit agents show {ref}`, or change it with "
            f"`evalkit agents edit {ref}`",
            code="agent-exists",
        )
    agent_id = int(row["id"])
    if body.api_key is not None:
        await _store_key(conn, agent_id, body.api_key, box)
    if body.mapping is not None:
        await _add_mapping(conn, actor, agent_id, body.mapping)
    return (await get_agent(conn, ws.id, body.name)).to_api()


async def edit_agent(
    conn: Conn,
    actor: Actor,
    ws: WorkspaceRow,
    name: str,
    edit: wire.AgentEdit,
    box: SecretBox | None,
) -> wire.AgentEdited:
    """Apply an edit. A new harness URL without a new key removes the stored key (and the
    variable name it came from): a key meant for one host is not sent to another."""
    if await conn.one("agent_lock_by_name", workspace_id=ws.id, name=name) is None:
        raise _no_agent(name, ws.facts.name)
    current = await get_agent(conn, ws.id, name)
    settings = _Settings(
        harness_url=_given(edit.harness_url, current.harness_url),
        api_key_env=_given(edit.api_key_env, current.api_key_env),
        trajectory_source=_given(edit.trajectory_source, current.trajectory_source),
        max_concurrent_runs=_given(edit.max_concurrent_runs, current.max_concurrent_runs),
        run_timeout=_given(edit.run_timeout, current.run_timeout),
        poll_interval=_given(edit.poll_interval, current.poll_interval),
        stop_grace=_given(edit.stop_grace, current.stop_grace),
        trajectory_wait=_given(edit.trajectory_wait, current.trajectory_wait),
        provides={**current.provides, **_given(edit.provides, {})},
    )
    url_changed = settings.harness_url != current.harness_url
    new_key = edit.api_key if isinstance(edit.api_key, str) else None
    if new_key is not None:
        check_api_key(new_key)
    drop_key = edit.api_key is None or (url_changed and new_key is None)
    if drop_key and url_changed and edit.api_key_env is UNSET:
        settings.api_key_env = None
    has_key = new_key is not None or (current.has_api_key and not drop_key)
    if isinstance(edit.mapping, dict):
        check_mapping(edit.mapping)
    has_mapping = isinstance(edit.mapping, dict) or current.mapping_version is not None
    _check_settings(settings, has_key=has_key, has_mapping=has_mapping)

    await conn.execute("agent_update", id=current.id, **_columns(settings))
    cleared = current.has_api_key and drop_key
    if new_key is not None:
        await _store_key(conn, current.id, new_key, box)
    elif cleared:
        await conn.execute("agent_set_api_key", id=current.id, api_key=None)
    retired = None
    if isinstance(edit.mapping, dict):
        retired = await _add_mapping(conn, actor, current.id, edit.mapping)
    agent = (await get_agent(conn, ws.id, name)).to_api()
    return wire.AgentEdited(agent=agent, api_key_cleared=cleared, mapping_retired=retired)


async def delete_agent(
    conn: Conn, ws: WorkspaceRow, name: str, *, force: bool
) -> wire.AgentDeleted:
    """Delete an agent and, with ``force``, its experiments; never while one is running."""
    locked = await conn.one("agent_lock_by_name", workspace_id=ws.id, name=name)
    if locked is None:
        raise _no_agent(name, ws.facts.name)
    counts = await conn.one("agent_count_experiments", agent_id=locked["id"])
    assert counts is not None
    total, running = int(counts["total"]), int(counts["running"])
    ref = f"{name}@{ws.facts.name}"
    if running:
        raise Conflict(
            f"agent {ref} has {_experiments(running)} running; deleting it would cut them "
            "short: wait until they finish (see `evalkit experiments list`), then delete it",
            code="agent-running",
        )
    if total and not force:
        raise Conflict(
            f"agent {ref} has {_experiments(total)}, which would be deleted with it (their "
            f"runs and trajectories too): `evalkit agents delete {ref} --yes` "
            "(API: ?force=true)",
            code="agent-has-experiments",
        )
    await conn.execute("agent_delete", id=locked["id"])
    return wire.AgentDeleted(workspace=ws.facts.name, name=name, experiments_deleted=total)


def _experiments(count: int) -> str:
    return f"{count} experiment{'s' if count != 1 else ''}"


def _given(value: Any, default: Any) -> Any:
    return default if value is UNSET else value


def _columns(s: _Settings) -> dict[str, Any]:
    return {
        "harness_url": s.harness_url,
        "api_key_env": s.api_key_env,
        "trajectory_source": s.trajectory_source,
        "max_concurrent_runs": s.max_concurrent_runs,
        "run_timeout": s.run_timeout,
        "poll_interval": s.poll_interval,
        "stop_grace": s.stop_grace,
        "trajectory_wait": s.trajectory_wait,
        "provides": _json.encode(s.provides).decode(),
    }


async def _store_key(conn: Conn, agent_id: int, key: str, box: SecretBox | None) -> None:
    assert box is not None, "a SecretBox is needed to store an API key"
    sealed = box.encrypt(key, key_context(agent_id))
    await conn.execute("agent_set_api_key", id=agent_id, api_key=sealed)


async def _add_mapping(conn: Conn, actor: Actor, agent_id: int, body: dict[str, Any]) -> int | None:
    """Retire the active mapping and add ``body`` as the next version; returns the retired
    version, if there was one."""
    retired = await conn.one("span_mapping_retire_active", agent_id=agent_id)
    await conn.one(
        "span_mapping_insert_active",
        agent_id=agent_id,
        body=_json.encode(body).decode(),
        actor_id=actor.user_id,
    )
    return None if retired is None else int(retired["version"])
