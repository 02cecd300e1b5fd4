"""``evalkit llm-providers ...`` and ``evalkit judge-default ...``: the LLM judge's setup."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.agents import _read_key
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import emit_json, say, table
from evalkit.model import judges as wire

providers = App(
    name="llm-providers",
    help=(
        "LLM providers: OpenAI-compatible chat completion endpoints (OpenAI, a LiteLLM or "
        "vLLM proxy, ...) the judge calls. Admins manage them; everyone logged in lists them. "
        "API keys are stored encrypted and never shown. See docs/judge.md."
    ),
)

judge_default = App(
    name="judge-default",
    help=(
        "The default judge: the provider and model that grade a case's `judge:` rubric "
        "(a case may name another model of the same provider). Admins set it; everyone "
        "logged in sees it."
    ),
)

judge = App(
    name="judge",
    help=(
        "The judge against human labels: `evalkit judge align` proposes few-shot examples "
        "from the runs people labelled, tries them, and applies them only when accepted. "
        "See docs/labels.md."
    ),
)
judge.command("evalkit.cli.alignment:judge_align", name="align")


@providers.command(name="create")
def providers_create(
    name: Annotated[str, Parameter(help="The provider's name: lower-case letters, digits, _.-")],
    /,
    *,
    base_url: Annotated[
        str,
        Parameter(
            help="The API's base URL, e.g. https://api.openai.com/v1; the judge POSTs to "
            "BASE_URL/chat/completions. The server calls it, so it must pass the server's "
            "egress policy."
        ),
    ],
    api_key_env: Annotated[
        str | None,
        Parameter(
            help="Name of the environment variable that holds the API key. The CLI reads the "
            "key from it and sends it; the server stores it encrypted and never shows it. "
            "Leave it out for an endpoint that needs no key."
        ),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Add an LLM provider (admins). Then make it the default judge with
    `evalkit judge-default set --provider NAME --model MODEL`."""
    body = wire.LlmProviderCreate(
        name=name,
        base_url=base_url,
        api_key=_read_key(api_key_env) if api_key_env else None,
        api_key_env=api_key_env,
    )
    with Client() as client:
        created: wire.LlmProvider = client.post("/api/llm-providers", body, type=wire.LlmProvider)
    if json:
        emit_json(created)
        return 0
    say(f"created LLM provider {created.name} at {created.base_url}")
    if created.has_api_key:
        say(f"API key from {created.api_key_env} stored encrypted")
    return 0


@providers.command(name="list")
def providers_list(*, json: JsonFlag = False) -> int:
    """List the LLM providers, with the one the default judge uses marked."""
    with Client() as client:
        rows: list[wire.LlmProvider] = client.get("/api/llm-providers", type=list[wire.LlmProvider])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                p.name,
                p.base_url,
                (f"stored (from {p.api_key_env})" if p.api_key_env else "stored")
                if p.has_api_key
                else "none",
                p.is_default_judge,
                p.created_at,
            )
            for p in rows
        ],
        ["name", "base url", "key", "default judge", "created"],
    )
    return 0


@providers.command(name="delete")
def providers_delete(
    name: Annotated[str, Parameter(help="The provider's name.")],
    /,
    *,
    yes: Annotated[
        bool,
        Parameter(
            help="Delete it even though the default judge uses it; the default judge is then "
            "unset, and judge rubrics score as errors until a new one is set."
        ),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Delete an LLM provider (admins). The default judge's provider needs --yes."""
    query = "?force=true" if yes else ""
    with Client() as client:
        deleted: wire.LlmProviderDeleted = client.request(
            "DELETE", f"/api/llm-providers/{name}{query}", type=wire.LlmProviderDeleted
        )
    if json:
        emit_json(deleted)
        return 0
    say(f"deleted LLM provider {deleted.name}")
    if deleted.default_judge_cleared:
        say(
            "the default judge used it and is unset now: set another with "
            "`evalkit judge-default set --provider NAME --model MODEL`"
        )
    return 0


def _show(judge: wire.JudgeDefault) -> None:
    if judge.provider is None:
        say(
            "no default judge is set: an admin sets one with "
            "`evalkit judge-default set --provider NAME --model MODEL`"
        )
        return
    lines = [
        ("provider", f"{judge.provider} ({judge.base_url})"),
        ("model", judge.model or "-"),
    ]
    if judge.updated_at is not None:
        lines.append(
            (
                "set",
                f"{judge.updated_at.isoformat(timespec='seconds')} by {judge.updated_by or '?'}",
            )
        )
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        say(f"{key.ljust(width)}  {value}")


@judge_default.command(name="set")
def judge_default_set(
    *,
    provider: Annotated[
        str, Parameter(help="An LLM provider's name (`evalkit llm-providers list`).")
    ],
    model: Annotated[str, Parameter(help="The model, as the provider spells it (e.g. gpt-5).")],
    json: JsonFlag = False,
) -> int:
    """Set the default judge (admins). Scores already given keep the model they were given
    by; `evalkit evaluate` re-scores."""
    with Client() as client:
        judge: wire.JudgeDefault = client.request(
            "PUT",
            "/api/judge-default",
            json=wire.JudgeDefaultSet(provider=provider, model=model),
            type=wire.JudgeDefault,
        )
    if json:
        emit_json(judge)
        return 0
    say(f"default judge: {judge.model} on {judge.provider}")
    return 0


@judge_default.command(name="show")
def judge_default_show(*, json: JsonFlag = False) -> int:
    """Show the default judge."""
    with Client() as client:
        judge: wire.JudgeDefault = client.get("/api/judge-default", type=wire.JudgeDefault)
    if json:
        emit_json(judge)
        return 0
    _show(judge)
    return 0


@judge_default.command(name="clear")
def judge_default_clear(*, json: JsonFlag = False) -> int:
    """Unset the default judge (admins). Cases with a `judge:` rubric then get an error
    score saying no judge is set, until one is."""
    with Client() as client:
        cleared: wire.JudgeDefaultCleared = client.request(
            "DELETE", "/api/judge-default", type=wire.JudgeDefaultCleared
        )
    if json:
        emit_json(cleared)
        return 0
    say("default judge unset" if cleared.cleared else "no default judge was set")
    return 0
