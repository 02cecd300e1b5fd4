"""``evalkit workspaces ...``: shared workspaces, members, promotion links."""

from __future__ import annotations

from typing import Annotated, Literal

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say, table
from evalkit.model import api

workspaces = App(
    name="workspaces",
    help="Workspaces hold datasets, agents and experiments. Everyone logged in reads all of them.",
)
members = App(name="members", help="Writers and reviewers of a shared workspace.")
workspaces.command(members)

WorkspaceArg = Annotated[str, Parameter(help="Workspace name.")]


@workspaces.command(name="create")
def workspaces_create(name: WorkspaceArg, /, *, json: JsonFlag = False) -> int:
    """Create a shared workspace (admin only)."""
    with Client() as client:
        ws: api.Workspace = client.post(
            "/api/workspaces", api.WorkspaceCreate(name=name), type=api.Workspace
        )
    if json:
        emit_json(ws)
    else:
        say(f"created shared workspace @{ws.name}")
    return 0


@workspaces.command(name="list")
def workspaces_list(*, json: JsonFlag = False) -> int:
    """List workspaces with your role in each and whether you can write to it."""
    with Client() as client:
        rows: list[api.Workspace] = client.get("/api/workspaces", type=list[api.Workspace])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                w.name,
                w.kind,
                w.owner,
                w.your_role,
                "write" if w.writable else "read-only",
                _promotion(w),
            )
            for w in rows
        ],
        ["workspace", "kind", "owner", "your role", "access", "promotion"],
    )
    return 0


def _promotion(ws: api.Workspace) -> str | None:
    if ws.promotes_to:
        return f"-> @{ws.promotes_to}"
    if ws.promoted_from:
        return f"<- @{ws.promoted_from}"
    return None


@workspaces.command(name="show")
def workspaces_show(name: WorkspaceArg, /, *, json: JsonFlag = False) -> int:
    """Show one workspace."""
    with Client() as client:
        ws: api.Workspace = client.get(f"/api/workspaces/{name}", type=api.Workspace)
    if json:
        emit_json(ws)
        return 0
    say(f"@{ws.name} ({ws.kind}{', owner ' + ws.owner if ws.owner else ''})")
    say(
        f"your access: {'write' if ws.writable else 'read-only'}"
        + (f", {ws.your_role}" if ws.your_role else "")
    )
    if ws.promotes_to:
        say(f"approved cases are promoted to @{ws.promotes_to}")
    if ws.promoted_from:
        say(f"fed by approvals in @{ws.promoted_from}: sync and review decisions are refused here")
    return 0


@workspaces.command(name="promote-to")
def workspaces_promote_to(
    source: Annotated[str, Parameter(help="Shared workspace whose approvals are promoted.")],
    target: Annotated[
        str | None, Parameter(help="Shared workspace that receives them (not with --remove).")
    ] = None,
    /,
    *,
    remove: Annotated[
        bool,
        Parameter(
            help="Remove SOURCE's link instead: the target takes sync and review again, "
            "approvals in SOURCE no longer promote, and versions already promoted stay."
        ),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Link SOURCE to TARGET, or remove SOURCE's link with --remove (admin only).

    While linked, approving a case in SOURCE adds it to TARGET, and TARGET refuses sync and
    review decisions; a source has one target and a target one source. Removing the link
    stops the promotions: TARGET keeps the versions it received and takes sync and review
    again.
    """
    if remove:
        if target is not None:
            raise CliError(
                f"--remove takes only the source: `evalkit workspaces promote-to {source} "
                "--remove` removes its link, whatever its target"
            )
        with Client() as client:
            link: api.Promotion = client.request(
                "DELETE", f"/api/workspaces/{source}/promotion", type=api.Promotion
            )
        if json:
            emit_json(link)
        else:
            say(
                f"approvals in @{link.source} no longer promote to @{link.target}; "
                f"@{link.target} takes sync and review again and keeps what was promoted"
            )
        return 0
    if target is None:
        raise CliError(
            f"name the target: `evalkit workspaces promote-to {source} TARGET`, or add "
            "--remove to remove the link"
        )
    with Client() as client:
        link = client.request(
            "PUT",
            f"/api/workspaces/{source}/promotion",
            json=api.PromotionSet(target=target),
            type=api.Promotion,
        )
    if json:
        emit_json(link)
    else:
        say(f"approvals in @{link.source} now promote to @{link.target}")
    return 0


@members.command(name="add")
def members_add(
    workspace: WorkspaceArg,
    username: Annotated[str, Parameter(help="The user to add.")],
    /,
    *,
    role: Annotated[
        Literal["writer", "reviewer"],
        Parameter(help="writer: syncs and runs; reviewer: approves and rejects cases."),
    ],
    json: JsonFlag = False,
) -> int:
    """Add a member to a shared workspace, or change their role (admin only)."""
    with Client() as client:
        added: api.MemberAdded = client.post(
            f"/api/workspaces/{workspace}/members",
            api.MemberAdd(username=username, role=role),
            type=api.MemberAdded,
        )
    if json:
        emit_json(added)
    elif added.previous_role and added.previous_role != role:
        say(f"{username} is now {role} of @{workspace} (was {added.previous_role})")
    else:
        say(f"{username} is {role} of @{workspace}")
    return 0


@members.command(name="list")
def members_list(workspace: WorkspaceArg, /, *, json: JsonFlag = False) -> int:
    """List the members of a workspace."""
    with Client() as client:
        rows: list[api.Member] = client.get(
            f"/api/workspaces/{workspace}/members", type=list[api.Member]
        )
    if json:
        emit_json(rows)
    else:
        table([(m.username, m.role, m.disabled) for m in rows], ["user", "role", "disabled"])
    return 0


@members.command(name="remove")
def members_remove(
    workspace: WorkspaceArg,
    username: Annotated[str, Parameter(help="The member to remove.")],
    /,
) -> int:
    """Remove a member from a shared workspace (admin only)."""
    with Client() as client:
        client.request("DELETE", f"/api/workspaces/{workspace}/members/{username}")
    say(f"removed {username} from @{workspace}")
    return 0
