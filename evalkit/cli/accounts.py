"""``evalkit login|logout|whoami`` and ``evalkit users ...``."""

from __future__ import annotations

import getpass
import os
import sys
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli import credentials
from evalkit.cli.app import JsonFlag, app
from evalkit.cli.client import Client, server_url
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import api

PASSWORD_ENV = "EVALKIT_PASSWORD"


def _read_password_stdin() -> str:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("--password-stdin was given but standard input had no password line")
    return password


@app.command
def login(
    url: Annotated[
        str | None, Parameter(help="Server URL (default: EVALKIT_SERVER_URL or the last one).")
    ] = None,
    /,
    *,
    username: Annotated[
        str | None, Parameter(help="Who to log in as (prompted when omitted).")
    ] = None,
    password_stdin: Annotated[
        bool, Parameter(help="Read the password from standard input.")
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Log in and keep the token for later commands.

    The password comes from --password-stdin, EVALKIT_PASSWORD (for scripts and CI), or a
    prompt. The token is stored in the user's config directory, readable only by you,
    and expires after the server's auth.token_ttl_hours.
    """
    base = server_url(url)
    interactive = sys.stdin.isatty()
    if username is None:
        if not interactive:
            raise CliError("pass --username when standard input is not a terminal")
        username = input("username: ").strip()
    if password_stdin:
        password = _read_password_stdin()
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    elif interactive:
        password = getpass.getpass(f"password for {username}@{base}: ")
    else:
        raise CliError(
            f"no password: set {PASSWORD_ENV}, pass --password-stdin, or run in a terminal"
        )
    with Client(base, token="") as client:
        session: api.Session = client.post(
            "/api/auth/login",
            api.LoginRequest(username=username, password=password),
            type=api.Session,
        )
    creds = credentials.load()
    creds.servers[base] = credentials.StoredLogin(
        token=session.token, username=username, expires_at=session.expires_at.isoformat()
    )
    creds.default_server = base
    path = credentials.save(creds)
    if json:
        emit_json({"server": base, "username": username, "expires_at": session.expires_at})
    else:
        say(f"logged in to {base} as {username} until {session.expires_at:%Y-%m-%d %H:%M %Z}")
        note(f"token stored in {path}")
    return 0


@app.command
def logout() -> int:
    """Revoke the stored token on the server and forget it here."""
    base = server_url()
    creds = credentials.load()
    stored = creds.servers.pop(base, None)
    if stored is None:
        say(f"not logged in to {base}")
        return 0
    try:
        with Client(base, token=stored.token) as client:
            client.post("/api/auth/logout")
    except CliError as exc:
        note(f"the server did not revoke the token ({exc.message}); forgetting it anyway")
    credentials.save(creds)
    say(f"logged out of {base}")
    return 0


@app.command
def whoami(*, json: JsonFlag = False) -> int:
    """Show who you are logged in as, your workspaces and when the login expires."""
    with Client() as client:
        me: api.WhoAmI = client.get("/api/auth/whoami", type=api.WhoAmI)
    if json:
        emit_json(me)
        return 0
    role = "admin" if me.user.is_admin else "user"
    say(f"{me.user.username} ({role}) on {client.base_url}")
    say(f"personal workspace: @{me.personal_workspace}")
    for m in me.memberships:
        say(f"{m.role} of @{m.workspace}")
    if me.token_expires_at:
        say(f"login expires {me.token_expires_at:%Y-%m-%d %H:%M %Z}")
    return 0


users = App(name="users", help="Manage users (adding and disabling needs an admin).")
app.command(users)


@users.command(name="add")
def users_add(
    name: Annotated[str, Parameter(help="The new username; also names their personal workspace.")],
    /,
    *,
    password_stdin: Annotated[
        bool, Parameter(help="Read the password from standard input instead of generating one.")
    ] = False,
    admin: Annotated[bool, Parameter(help="Make the user an admin.")] = False,
    json: JsonFlag = False,
) -> int:
    """Add a user (admin only). Prints a generated password unless --password-stdin."""
    password = _read_password_stdin() if password_stdin else None
    with Client() as client:
        created: api.UserCreated = client.post(
            "/api/users",
            api.UserCreate(username=name, password=password, is_admin=admin),
            type=api.UserCreated,
        )
    if json:
        emit_json(created)
        return 0
    say(f"added user {created.user.username} with personal workspace @{created.personal_workspace}")
    if created.generated_password:
        say(f"password: {created.generated_password}")
        note("the password is shown only once; hand it over securely")
    return 0


@users.command(name="list")
def users_list(*, json: JsonFlag = False) -> int:
    """List users."""
    with Client() as client:
        rows: list[api.User] = client.get("/api/users", type=list[api.User])
    if json:
        emit_json(rows)
    else:
        table(
            [(u.username, u.is_admin, u.disabled, u.created_at) for u in rows],
            ["user", "admin", "disabled", "created"],
        )
    return 0


@users.command(name="disable")
def users_disable(
    name: Annotated[str, Parameter(help="The user to disable.")], /, *, json: JsonFlag = False
) -> int:
    """Disable a user (admin only): they can no longer log in and their tokens stop working."""
    with Client() as client:
        user: api.User = client.post(f"/api/users/{name}/disable", type=api.User)
    if json:
        emit_json(user)
    else:
        say(f"disabled {user.username}; their tokens are revoked")
    return 0
