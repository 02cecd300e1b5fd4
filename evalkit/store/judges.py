"""LLM providers and the default judge.

A provider's key is SecretBox text bound to the provider's id (:func:`key_context`); no
function here returns it in clear. :func:`default_judge_target` hands the ciphertext to
:func:`evalkit.scoring.judge.load_judge`, which decrypts it for the judge's requests.

The default judge is the server setting ``judge_default``: ``{"provider_id", "model"}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgspec

from evalkit.auth.access import Actor
from evalkit.auth.secrets import SecretBox
from evalkit.db import Conn
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import judges as wire
from evalkit.model.names import check_name
from evalkit.store.agents import MAX_URL_LENGTH, check_api_key, check_env_name

JUDGE_DEFAULT_KEY = "judge_default"
MAX_MODEL_LENGTH = 200

_json = msgspec.json.Encoder()


def key_context(provider_id: int) -> str:
    """The associated data of a provider's key: its id."""
    return f"llm-provider-api-key:{provider_id}"


@dataclass(frozen=True, slots=True)
class JudgeTarget:
    """The default judge as the scoring job needs it; ``api_key`` is SecretBox text."""

    provider_id: int
    provider: str
    base_url: str
    model: str
    api_key: str | None = field(repr=False)


# --------------------------------------------------------------------------- rules


def check_base_url(
    url: str, what: str = "base_url", example: str = "https://api.openai.com/v1"
) -> None:
    """An http(s) URL with a host; no fragment, and no query for a base URL (a path is
    appended to it)."""
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() for c in url)
        or len(url) > MAX_URL_LENGTH
        or (parts.query and what == "base_url")
        or parts.fragment
    ):
        rule = "with a host and no query" if what == "base_url" else "with a host"
        raise BadRequest(
            f"{what} {url!r} is not an http(s) URL {rule} (e.g. {example})", code="bad-url"
        )
    if parts.username is not None or parts.password is not None:
        raise BadRequest(
            f"{what} has credentials in it (user:password@); everyone logged in sees the URL, "
            "so give the key with --api-key-env (the API's api_key) instead",
            code="bad-url",
        )


def _check_model(model: str) -> None:
    if not model or len(model) > MAX_MODEL_LENGTH or any(c.isspace() for c in model):
        raise BadRequest(
            f"model {model!r} is not a model name: 1 to {MAX_MODEL_LENGTH} characters "
            "without spaces, as the provider spells it (e.g. gpt-5)",
            code="bad-model",
        )


# --------------------------------------------------------------------------- providers


def _provider(row: dict[str, Any]) -> wire.LlmProvider:
    return wire.LlmProvider(
        name=row["name"],
        base_url=row["base_url"],
        has_api_key=row["has_api_key"],
        api_key_env=row["api_key_env"],
        is_default_judge=row["is_default_judge"],
        created_at=row["created_at"],
        created_by=row["created_by"],
    )


def _no_provider(name: str) -> NotFound:
    return NotFound(
        f"no LLM provider named {name!r}; see `evalkit llm-providers list`",
        code="no-such-provider",
    )


async def list_providers(conn: Conn) -> list[wire.LlmProvider]:
    return [_provider(r) for r in await conn.all("llm_provider_list", name=None)]


def check_provider(body: wire.LlmProviderCreate) -> None:
    """The rules on a new provider that need no database."""
    check_name("LLM provider", body.name)
    check_base_url(body.base_url)
    if body.api_key is not None:
        check_api_key(body.api_key)
    if body.api_key_env is not None:
        check_env_name(body.api_key_env)


async def create_provider(
    conn: Conn, actor: Actor, body: wire.LlmProviderCreate, box: SecretBox | None
) -> wire.LlmProvider:
    """Create a provider; ``box`` encrypts ``body.api_key`` (needed only when one is given).
    The caller checks the base URL against the egress policy."""
    check_provider(body)
    row = await conn.one(
        "llm_provider_insert",
        name=body.name,
        base_url=body.base_url,
        api_key_env=body.api_key_env,
        actor_id=actor.user_id,
    )
    if row is None:
        raise Conflict(
            f"LLM provider {body.name} already exists; see `evalkit llm-providers list`, or "
            f"delete it first (`evalkit llm-providers delete {body.name}`)",
            code="provider-exists",
        )
    provider_id = int(row["id"])
    if body.api_key is not None:
        assert box is not None, "a SecretBox is needed to store an API key"
        sealed = box.encrypt(body.api_key, key_context(provider_id))
        await conn.execute("llm_provider_set_api_key", id=provider_id, api_key=sealed)
    rows = await conn.all("llm_provider_list", name=body.name)
    return _provider(rows[0])


async def delete_provider(conn: Conn, name: str, *, force: bool) -> wire.LlmProviderDeleted:
    """Delete a provider; the default judge's only with ``force`` (which unsets it)."""
    locked = await conn.one("llm_provider_lock_by_name", name=name)
    if locked is None:
        raise _no_provider(name)
    current = await conn.one("llm_provider_get_default_judge")
    is_default = current is not None and current["provider_id"] == locked["id"]
    if is_default and not force:
        raise Conflict(
            f"LLM provider {name} is the default judge's; deleting it leaves judge rubrics "
            "ungraded: set another default first (`evalkit judge-default set --provider "
            f"OTHER --model M`), or delete it anyway with `evalkit llm-providers delete {name} "
            "--yes` (API: ?force=true)",
            code="provider-is-default-judge",
        )
    if is_default:
        await conn.one("server_setting_delete", key=JUDGE_DEFAULT_KEY)
    await conn.execute("llm_provider_delete", id=locked["id"])
    return wire.LlmProviderDeleted(name=name, default_judge_cleared=is_default)


# --------------------------------------------------------------------------- default judge


async def get_default_judge(conn: Conn) -> wire.JudgeDefault:
    row = await conn.one("llm_provider_get_default_judge")
    if row is None:
        return wire.JudgeDefault()
    return wire.JudgeDefault(
        provider=row["provider"],
        base_url=row["base_url"],
        model=row["model"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


async def set_default_judge(
    conn: Conn, actor: Actor, body: wire.JudgeDefaultSet
) -> wire.JudgeDefault:
    _check_model(body.model)
    locked = await conn.one("llm_provider_lock_by_name", name=body.provider)
    if locked is None:
        raise _no_provider(body.provider)
    value = {"provider_id": int(locked["id"]), "model": body.model}
    await conn.execute(
        "server_setting_put",
        key=JUDGE_DEFAULT_KEY,
        value=_json.encode(value).decode(),
        actor_id=actor.user_id,
    )
    return await get_default_judge(conn)


async def clear_default_judge(conn: Conn) -> wire.JudgeDefaultCleared:
    row = await conn.one("server_setting_delete", key=JUDGE_DEFAULT_KEY)
    return wire.JudgeDefaultCleared(cleared=row is not None)


async def default_judge_target(conn: Conn) -> JudgeTarget | None:
    """The default judge with its provider's key (SecretBox text), or None when unset."""
    row = await conn.one("llm_provider_get_default_judge")
    if row is None:
        return None
    return JudgeTarget(
        provider_id=int(row["provider_id"]),
        provider=row["provider"],
        base_url=row["base_url"],
        model=row["model"],
        api_key=row["api_key"],
    )
