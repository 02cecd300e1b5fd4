"""``evalkit evaluators ...``: remote evaluators (Custom Evaluator API endpoints)."""

from __future__ import annotations

from typing import Annotated, Literal

from cyclopts import App, Parameter

from evalkit.cli.agents import _read_key
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say, table
from evalkit.errors import BadRequest
from evalkit.model import evaluators as wire
from evalkit.model.names import Ref, parse_ref

evaluators = App(
    name="evaluators",
    help=(
        "Remote evaluators: HTTP endpoints implementing the Custom Evaluator API "
        "(`evalkit contracts export` writes its schema). A case selects one by name under "
        "`evaluators: custom: NAME: CONFIG`; runs are scored by the evaluators of their "
        "agent's workspace. Writers and admins of a workspace manage its evaluators; "
        "everyone logged in lists them. API keys are stored encrypted and never shown."
    ),
)

EvaluatorRef = Annotated[
    str,
    Parameter(
        help="NAME or NAME@WORKSPACE (default workspace: your personal one); NAME is what "
        "cases write under evaluators.custom."
    ),
]
WorkspaceOpt = Annotated[
    str | None,
    Parameter(help="The evaluator's workspace (default: your personal one, or NAME@WORKSPACE's)."),
]


def _ref(client: Client, text: str, workspace: str | None) -> Ref:
    """NAME or NAME@WS, with --workspace agreeing or absent; bare = personal workspace."""
    try:
        ref = parse_ref(text, "evaluator")
    except BadRequest as exc:
        raise CliError(exc.message, exit_code=2) from None
    if ref.workspace and workspace and ref.workspace != workspace:
        raise CliError(
            f"{text} names workspace {ref.workspace} but --workspace says {workspace}; "
            "give the workspace once",
            exit_code=2,
        )
    return Ref(ref.name, ref.workspace or workspace or client.personal_workspace())


@evaluators.command(name="create")
def evaluators_create(
    name: EvaluatorRef,
    /,
    *,
    workspace: WorkspaceOpt = None,
    endpoint: Annotated[
        str,
        Parameter(
            help="The URL evalkit POSTs each run to. The server calls it, so it must pass the "
            "server's egress policy."
        ),
    ],
    kind: Annotated[
        Literal["score", "gauge"],
        Parameter(
            help="score: its scores count towards pass/fail; gauge: they are measurements, "
            "only shown. A score in the answer may say its own kind."
        ),
    ] = "score",
    api_key_env: Annotated[
        str | None,
        Parameter(
            help="Name of the environment variable that holds the key evalkit sends as "
            "'Authorization: Bearer KEY'. The CLI reads the key from it; the server stores "
            "it encrypted and never shows it."
        ),
    ] = None,
    timeout: Annotated[
        float,
        Parameter(
            help=f"Seconds one call may take, above 0 and at most {wire.MAX_TIMEOUT:g}; a "
            "slower call is recorded as an error on the run's score."
        ),
    ] = wire.DEFAULT_TIMEOUT,
    json: JsonFlag = False,
) -> int:
    """Register a remote evaluator in a workspace (its writers and admins)."""
    key = _read_key(api_key_env) if api_key_env else None
    with Client() as client:
        ref = _ref(client, name, workspace)
        body = wire.EvaluatorCreate(
            name=ref.name,
            endpoint=endpoint,
            kind=kind,
            api_key=key,
            api_key_env=api_key_env,
            timeout=timeout,
        )
        created: wire.Evaluator = client.post(
            f"/api/workspaces/{ref.workspace}/evaluators", body, type=wire.Evaluator
        )
    if json:
        emit_json(created)
        return 0
    say(
        f"created evaluator {created.name}@{created.workspace} ({created.kind}) at "
        f"{created.endpoint}, timeout {created.timeout:g} s"
    )
    if created.has_api_key:
        say(f"API key from {created.api_key_env} stored encrypted")
    return 0


@evaluators.command(name="list")
def evaluators_list(
    *,
    workspace: Annotated[
        str | None, Parameter(help="Only this workspace's evaluators (default: every workspace).")
    ] = None,
    json: JsonFlag = False,
) -> int:
    """List remote evaluators with their endpoint, kind, key and timeout."""
    path = f"/api/workspaces/{workspace}/evaluators" if workspace else "/api/evaluators"
    with Client() as client:
        rows: list[wire.Evaluator] = client.get(path, type=list[wire.Evaluator])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                f"{e.name}@{e.workspace}",
                e.kind,
                e.endpoint,
                (f"stored (from {e.api_key_env})" if e.api_key_env else "stored")
                if e.has_api_key
                else "none",
                f"{e.timeout:g}s",
            )
            for e in rows
        ],
        ["evaluator", "kind", "endpoint", "key", "timeout"],
    )
    return 0


@evaluators.command(name="delete")
def evaluators_delete(
    name: EvaluatorRef, /, *, workspace: WorkspaceOpt = None, json: JsonFlag = False
) -> int:
    """Delete a remote evaluator (the workspace's writers and admins). Scores it already
    gave are kept; cases that still name it get a W-CUSTOM-UNKNOWN warning from lint."""
    with Client() as client:
        ref = _ref(client, name, workspace)
        deleted: wire.EvaluatorDeleted = client.request(
            "DELETE",
            f"/api/workspaces/{ref.workspace}/evaluators/{ref.name}",
            type=wire.EvaluatorDeleted,
        )
    if json:
        emit_json(deleted)
        return 0
    say(f"deleted evaluator {deleted.name}@{deleted.workspace}")
    return 0
