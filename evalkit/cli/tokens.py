"""``evalkit tokens ...``: agent tokens, the credentials a deployed agent sends spans with."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import otel as wire

tokens = App(
    name="tokens",
    help=(
        "Agent tokens: bearer tokens with which a deployed agent (or an OpenTelemetry "
        "Collector) sends its spans to evalkit's collector, for one agent only. They never "
        "expire; revoke one when it leaks or its deployment goes. Writers of the agent's "
        "workspace and admins mint and revoke them; the token is shown once."
    ),
)

AgentOpt = Annotated[
    str,
    Parameter(help="The agent, NAME@WORKSPACE (a bare NAME is in your personal workspace)."),
]


@tokens.command(name="create")
def tokens_create(
    *,
    agent: AgentOpt,
    note_text: Annotated[
        str | None,
        Parameter(name="--note", help="A note to tell this token apart later (up to 200)."),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Mint a token for an agent. It is printed once: store it where the agent runs
    (EVALKIT_OTEL_TOKEN, or the Authorization header of its OTLP exporter)."""
    with Client() as client:
        ref = client.resolve(agent, "agent")
        created: wire.AgentTokenCreated = client.post(
            f"/api/workspaces/{ref.workspace}/agents/{ref.name}/tokens",
            wire.AgentTokenCreate(note=note_text),
            type=wire.AgentTokenCreated,
        )
    if json:
        emit_json(created)
        return 0
    say(created.token)
    note(
        f"token {created.info.id} for {created.info.agent}@{created.info.workspace}: shown "
        "once, store it now; send it as 'Authorization: Bearer <token>' to "
        "<server>/api/otel/v1/traces"
    )
    return 0


@tokens.command(name="list")
def tokens_list(
    *,
    agent: Annotated[
        str | None, Parameter(help="Only this agent's tokens (NAME@WORKSPACE).")
    ] = None,
    json: JsonFlag = False,
) -> int:
    """List agent tokens (their first characters, never the tokens), newest first."""
    with Client() as client:
        if agent:
            ref = client.resolve(agent, "agent")
            path = f"/api/workspaces/{ref.workspace}/agents/{ref.name}/tokens"
        else:
            path = "/api/tokens"
        rows: list[wire.AgentToken] = client.get(path, type=list[wire.AgentToken])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                t.id,
                f"{t.agent}@{t.workspace}",
                t.hint + "…",
                "revoked" if t.revoked_at else "active",
                t.created_at,
                t.created_by,
                t.last_used_at,
                t.note,
            )
            for t in rows
        ],
        ["id", "agent", "token", "state", "created", "by", "last used", "note"],
    )
    return 0


@tokens.command(name="revoke")
def tokens_revoke(
    token_id: Annotated[int, Parameter(help="The token's id (see `evalkit tokens list`).")],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """Revoke an agent token: the collector refuses it from now on. Revoking twice is fine."""
    with Client() as client:
        revoked: wire.AgentToken = client.post(
            f"/api/tokens/{token_id}/revoke", type=wire.AgentToken
        )
    if json:
        emit_json(revoked)
        return 0
    if revoked.revoked_at is None:  # pragma: no cover - the server always sets it
        raise CliError(f"token {token_id} is not revoked")
    say(f"revoked token {revoked.id} of {revoked.agent}@{revoked.workspace}")
    return 0
