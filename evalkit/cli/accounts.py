"""``evalkit login|logout|whoami`` and ``evalkit users ...``."""

from __future__ import annotations

import getpass
import os
import sys
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli import credentials, login_sso
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client, server_url
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import api
from evalkit.model.sso import (
    AuditEntry,
    PasswordChange,
    PasswordChanged,
    PasswordReset,
    SubjectBind,
)

PASSWORD_ENV = "EVALKIT_PASSWORD"


def _read_password_stdin() -> str:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("--password-stdin was given but standard input had no password line")
    return password


def login(
    url: Annotated[
        str | None, Parameter(help="Server URL (default: EVALKIT_SERVER_URL or the last one).")
    ] = None,
    /,
    *,
    username: Annotated[
        str | None, Parameter(help="Who to log in as, with a password (prompted when omitted).")
    ] = None,
    password_stdin: Annotated[
        bool, Parameter(help="Read the password from standard input.")
    ] = False,
    sso: Annotated[
        bool,
        Parameter(help="Sign in through the server's identity provider (single sign-on)."),
    ] = False,
    device: Annotated[
        bool,
        Parameter(
            help="With single sign-on, use the device flow: a code to enter in any browser "
            "(for machines without one, e.g. over SSH)."
        ),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Log in and keep the token for later commands.

    With a password: it comes from --password-stdin, EVALKIT_PASSWORD (for scripts and CI),
    or a prompt. With single sign-on (--sso, or by default when the server has it on and no
    username or password is given): the device flow when the identity provider offers it,
    else your browser opens on the provider and the CLI catches its answer on a loopback
    port (EVALKIT_NO_BROWSER=1 only prints the address).

    The token is stored in the user's config directory, readable only by you, and expires
    after the server's auth.token_ttl_hours. Machine clients with EVALKIT_OIDC_CLIENT_ID and
    EVALKIT_OIDC_CLIENT_SECRET need no login: every command fetches its own access token.
    """
    base = server_url(url)
    if login_sso.machine_credentials() is not None and not (sso or device or username):
        return _machine_login(base, json)
    session = _new_session(base, username, password_stdin, sso=sso, device=device)
    username = session.user.username
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


def _machine_login(base: str, json: bool) -> int:
    """A machine client's login: nothing to store, as every command signs in with the
    client credentials; says who they sign in as."""
    with Client(base) as client:
        me: api.WhoAmI = client.get("/api/auth/whoami", type=api.WhoAmI)
    if json:
        emit_json({"server": base, "username": me.user.username, "expires_at": None})
    else:
        say(
            f"{login_sso.CLIENT_ID_ENV} is set: every command signs in to {base} as "
            f"{me.user.username} with client credentials; nothing is stored"
        )
    return 0


def _new_session(
    base: str, username: str | None, password_stdin: bool, *, sso: bool, device: bool
) -> api.Session:
    """A session by single sign-on when asked for, or when the server has it and no
    password is at hand; else by password."""
    has_password = password_stdin or bool(os.environ.get(PASSWORD_ENV))
    if sso or device or (username is None and not has_password):
        info = login_sso.sso_info(base)
        if info.enabled:
            with Client(base, token="") as client:
                return login_sso.login(client, info, device=True if device else None)
        if sso or device:
            raise CliError(
                f"{base} has no single sign-on; log in with a password (--username), or ask "
                "the admin to set auth.oidc"
            )
    return _password_login(base, username, password_stdin)


def _password_login(base: str, username: str | None, password_stdin: bool) -> api.Session:
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
        return client.post(
            "/api/auth/login",
            api.LoginRequest(username=username, password=password),
            type=api.Session,
        )


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


@users.command(name="add")
def users_add(
    name: Annotated[str, Parameter(help="The new username; also names their personal workspace.")],
    /,
    *,
    password_stdin: Annotated[
        bool, Parameter(help="Read the password from standard input instead of generating one.")
    ] = False,
    admin: Annotated[bool, Parameter(help="Make the user an admin.")] = False,
    subject: Annotated[
        str | None,
        Parameter(
            help="Bind an identity-provider subject (its 'sub'): a machine client's access "
            "tokens then act as this user. Such a user gets no password unless "
            "--password-stdin gives one."
        ),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Add a user (admin only). Prints a generated password unless --password-stdin or
    --subject."""
    password = _read_password_stdin() if password_stdin else None
    with Client() as client:
        created: api.UserCreated = client.post(
            "/api/users",
            api.UserCreate(username=name, password=password, is_admin=admin, subject=subject),
            type=api.UserCreated,
        )
    if json:
        emit_json(created)
        return 0
    say(f"added user {created.user.username} with personal workspace @{created.personal_workspace}")
    if subject:
        say(f"bound to the identity-provider subject {subject}")
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
    return _switch_user(name, "disable", "disabled {}; their tokens are revoked", json)


@users.command(name="enable")
def users_enable(
    name: Annotated[str, Parameter(help="The disabled user to enable.")],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """Enable a disabled user (admin only): they can log in again. The tokens revoked when
    they were disabled stay revoked, so they log in for a new one."""
    said = "enabled {}; they can log in again (their old tokens stay revoked)"
    return _switch_user(name, "enable", said, json)


def _switch_user(name: str, action: str, said: str, json: bool) -> int:
    """POST /api/users/NAME/<action> and say ``said`` (``{}``: the user's name)."""
    with Client() as client:
        user: api.User = client.post(f"/api/users/{name}/{action}", type=api.User)
    if json:
        emit_json(user)
    else:
        say(said.format(user.username))
    return 0


@users.command(name="password")
def users_password(
    *,
    password_stdin: Annotated[
        bool,
        Parameter(help="Read two lines from standard input: the old password, then the new."),
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Change your own password. The old one is checked (wrong guesses count toward the
    login limits); your other logins (other machines, browsers) are logged out."""
    if password_stdin:
        old = _read_password_stdin()
        new = _read_password_stdin()
    elif sys.stdin.isatty():
        old = getpass.getpass("current password: ")
        new = getpass.getpass("new password: ")
        if getpass.getpass("new password again: ") != new:
            raise CliError("the two new passwords differ; nothing was changed")
    else:
        raise CliError("pass --password-stdin (old, then new, one per line) or run in a terminal")
    with Client() as client:
        changed: PasswordChanged = client.post(
            "/api/auth/password",
            PasswordChange(old_password=old, new_password=new),
            type=PasswordChanged,
        )
    if json:
        emit_json(changed)
    else:
        say(f"changed the password of {changed.username}")
        if changed.other_tokens_revoked:
            note(f"{changed.other_tokens_revoked} other login(s) were logged out")
    return 0


@users.command(name="reset")
def users_reset(
    name: Annotated[str, Parameter(help="The user whose password to reset.")],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """Give a user a new generated password (admin only). It is printed once; every login
    of theirs is logged out, so they log in again with it."""
    with Client() as client:
        reset: PasswordReset = client.post(f"/api/users/{name}/reset-password", type=PasswordReset)
    if json:
        emit_json(reset)
        return 0
    say(f"new password for {reset.username}: {reset.generated_password}")
    note(
        f"shown only once; hand it over securely. {reset.tokens_revoked} login(s) of "
        f"{reset.username} were logged out"
    )
    return 0


@users.command(name="bind")
def users_bind(
    name: Annotated[str, Parameter(help="The existing user to bind.")],
    /,
    *,
    subject: Annotated[
        str, Parameter(help="The identity-provider subject ('sub') that signs in as this user.")
    ],
    json: JsonFlag = False,
) -> int:
    """Bind an existing user to an identity-provider subject (admin only): their single
    sign-on then logs in as this user, and a machine client's tokens act as it."""
    with Client() as client:
        user: api.User = client.request(
            "PUT", f"/api/users/{name}/subject", json=SubjectBind(subject=subject), type=api.User
        )
    if json:
        emit_json(user)
    else:
        say(f"bound {user.username} to the subject {subject}")
    return 0


def audit_log(
    *,
    limit: Annotated[int, Parameter(help="How many entries, newest first (1 to 1000).")] = 50,
    action: Annotated[
        str | None, Parameter(help="Only this action, e.g. user.add or member.remove.")
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Show the audit log of admin actions (admins only): users added, disabled, enabled and
    reset, workspaces created, members added and removed, promotion links set and removed,
    LLM providers and the default judge."""
    query = f"/api/audit?limit={limit}" + (f"&action={action}" if action else "")
    with Client() as client:
        entries: list[AuditEntry] = client.get(query, type=list[AuditEntry])
    if json:
        emit_json(entries)
        return 0
    table(
        [(e.at, e.actor, e.action, e.target, _detail(e.detail)) for e in entries],
        ["when", "by", "action", "target", "detail"],
    )
    return 0


def _detail(detail: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in detail.items() if v is not None)
