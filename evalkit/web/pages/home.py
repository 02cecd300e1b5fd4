"""Login, logout, and the workspaces a user can open."""

from __future__ import annotations

from starlette.responses import RedirectResponse, Response

from evalkit.edge.routes import agents, datasets, experiments, workspaces
from evalkit.errors import TooManyRequests, Unauthorized
from evalkit.store import accounts, login_limits
from evalkit.web.page import (
    SESSION_COOKIE,
    Page,
    WebCall,
    from_another_site,
    safe_next,
    set_session,
    use,
)
from evalkit.web.pages.sso import sso_enabled


async def login_form(call: WebCall) -> Response:
    if not call.actor.is_anonymous:
        return RedirectResponse(safe_next(call.request.query_params.get("next")), 303)
    expired = call.request.query_params.get("expired") == "1"
    return call.render(
        "login.html",
        next=safe_next(call.request.query_params.get("next")),
        error="Your session ended; log in again." if expired else None,
        username="",
        sso=sso_enabled(call),
    )


async def login_submit(call: WebCall) -> Response:
    # No CSRF value exists before a session, and a SameSite cookie is still set by the
    # answer to another site's top-level POST: that site could log its visitors in as
    # itself (login CSRF). Browsers say where the form came from; refuse other sites.
    form = await call.request.form()
    username = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    target = safe_next(str(form.get("next", "")))
    if from_another_site(call.request):
        return call.render(
            "login.html",
            status=403,
            next=target,
            error="This login form was sent from another site; log in on this page instead.",
            username=username,
            sso=sso_enabled(call),
        )
    try:
        async with call.db.connection() as conn:
            session = await login_limits.login(
                conn, username, password, call.settings.auth.token_ttl_hours, call.address
            )
    except (Unauthorized, TooManyRequests) as exc:
        return call.render(
            "login.html",
            status=exc.status,
            next=target,
            error=exc.message,
            username=username,
            sso=sso_enabled(call),
        )
    response = RedirectResponse(target, 303)
    max_age = call.settings.auth.token_ttl_hours * 3600
    set_session(response, call.request, session.token, max_age)
    return response


async def logout(call: WebCall) -> Response:
    await call.form()  # the CSRF check: another site must not log people out
    if call.token_id is not None:
        async with call.db.connection() as conn:
            await accounts.revoke_login_token(conn, call.token_id)
    response = RedirectResponse("/login", 303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def workspaces_page(call: WebCall) -> Response:
    found = await use(call, workspaces.workspaces_list)
    return call.render("workspaces.html", workspaces=found)


async def workspace_page(call: WebCall) -> Response:
    name = call.param("workspace")
    params = {"workspace": name}
    return call.render(
        "workspace.html",
        ws=await use(call, workspaces.workspaces_show, params=params),
        datasets=await use(call, datasets.datasets_list, params=params),
        agents=await use(call, agents.agents_list, params=params),
        experiments=await use(
            call, experiments.experiments_list, query={"workspace": name, "limit": 20}
        ),
    )


PAGES = [
    Page("GET", "/login", login_form, public=True),
    Page("POST", "/login", login_submit, public=True),
    Page("POST", "/logout", logout),
    Page("GET", "/", workspaces_page),
    Page("GET", "/w/{workspace}", workspace_page),
]
