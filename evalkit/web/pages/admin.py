"""Admin pages: users, shared workspaces with their members and promotion links, LLM
providers and the default judge. Every page asks the admin rule first; every form goes
through the admin-only API handler, which asks it again."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.responses import RedirectResponse, Response

from evalkit.auth import access
from evalkit.edge.routes import accounts, judges, workspaces
from evalkit.model import api
from evalkit.model import judges as judge_wire
from evalkit.web.page import Page, WebCall, form_struct, use

SECTIONS = (
    ("/admin", "Users"),
    ("/admin/workspaces", "Workspaces and members"),
    ("/admin/judges", "LLM providers and judge"),
)
DONE = {
    "disabled": "User disabled; their sessions and tokens are revoked.",
    "enabled": "User enabled: they can log in again (their old sessions stay logged out).",
    "workspace": "Shared workspace created.",
    "member": "Member saved.",
    "removed": "Member removed.",
    "promotion": "Promotion link saved.",
    "unlinked": (
        "Promotion link removed: the former target takes sync and review again and keeps "
        "the versions already promoted."
    ),
    "provider": "LLM provider added.",
    "deleted": "LLM provider deleted.",
    "judge": "Default judge saved.",
    "cleared": "Default judge unset: judge rubrics now score as errors until one is set.",
}


def _require_admin(call: WebCall) -> None:
    access.require_admin(call.actor, "open the admin pages")


def _render(call: WebCall, template: str, **context: Any) -> Response:
    return call.render(
        template,
        sections=SECTIONS,
        done=DONE.get(call.request.query_params.get("done", "")),
        **context,
    )


def _back(path: str, done: str) -> Response:
    return RedirectResponse(f"{path}?done={done}", 303)


def _checked(form: dict[str, Any], name: str) -> bool:
    return str(form.get(name, "")) in ("on", "true", "1")


def _text(form: dict[str, Any], name: str) -> str | None:
    value = str(form.get(name, "")).strip()
    return value or None


# --------------------------------------------------------------------------- users


async def users_page(call: WebCall) -> Response:
    _require_admin(call)
    users: list[api.User] = await use(call, accounts.users_list)
    return _render(call, "admin_users.html", users=users)


async def user_add(call: WebCall) -> Response:
    """The new user's generated password is on this answer only: no redirect, no cache."""
    form = await call.form()
    body = form_struct(
        api.UserCreate,
        {"username": str(form.get("username", "")).strip(), "is_admin": _checked(form, "is_admin")},
    )
    created: api.UserCreated = await use(call, accounts.users_create, body=body)
    response = _render(call, "admin_user_created.html", created=created)
    response.headers["cache-control"] = "no-store"
    return response


async def user_disable(call: WebCall) -> Response:
    await call.form()
    await use(call, accounts.users_disable, params={"username": call.param("username")})
    return _back("/admin", "disabled")


async def user_enable(call: WebCall) -> Response:
    await call.form()
    await use(call, accounts.users_enable, params={"username": call.param("username")})
    return _back("/admin", "enabled")


# --------------------------------------------------------------------------- workspaces


async def workspaces_page(call: WebCall) -> Response:
    _require_admin(call)
    found: list[api.Workspace] = await use(call, workspaces.workspaces_list)
    shared = [ws for ws in found if ws.kind == "shared"]
    members = {
        ws.name: await use(call, workspaces.members_list, params={"workspace": ws.name})
        for ws in shared
    }
    users: list[api.User] = await use(call, accounts.users_list)
    return _render(
        call,
        "admin_workspaces.html",
        shared=shared,
        members=members,
        usernames=[u.username for u in users if not u.disabled],
        links=[(ws.name, ws.promotes_to) for ws in shared if ws.promotes_to],
        q=quote,
    )


async def workspace_create(call: WebCall) -> Response:
    form = await call.form()
    body = form_struct(api.WorkspaceCreate, {"name": str(form.get("name", "")).strip()})
    await use(call, workspaces.workspaces_create, body=body)
    return _back("/admin/workspaces", "workspace")


async def member_add(call: WebCall) -> Response:
    form = await call.form()
    body = form_struct(
        api.MemberAdd,
        {"username": str(form.get("username", "")).strip(), "role": form.get("role", "")},
    )
    params = {"workspace": call.param("workspace")}
    await use(call, workspaces.members_add, params=params, body=body)
    return _back("/admin/workspaces", "member")


async def member_remove(call: WebCall) -> Response:
    await call.form()
    params = {"workspace": call.param("workspace"), "username": call.param("username")}
    await use(call, workspaces.members_remove, params=params)
    return _back("/admin/workspaces", "removed")


async def promotion_set(call: WebCall) -> Response:
    form = await call.form()
    body = form_struct(api.PromotionSet, {"target": str(form.get("target", "")).strip()})
    params = {"workspace": str(form.get("source", "")).strip()}
    await use(call, workspaces.promotion_set, params=params, body=body)
    return _back("/admin/workspaces", "promotion")


async def promotion_remove(call: WebCall) -> Response:
    await call.form()
    await use(call, workspaces.promotion_remove, params={"workspace": call.param("workspace")})
    return _back("/admin/workspaces", "unlinked")


# --------------------------------------------------------------------------- judges


async def judges_page(call: WebCall) -> Response:
    _require_admin(call)
    providers: list[judge_wire.LlmProvider] = await use(call, judges.providers_list)
    judge: judge_wire.JudgeDefault = await use(call, judges.judge_default_show)
    return _render(call, "admin_judges.html", providers=providers, judge=judge)


async def provider_add(call: WebCall) -> Response:
    form = await call.form()
    body = form_struct(
        judge_wire.LlmProviderCreate,
        {
            "name": str(form.get("name", "")).strip(),
            "base_url": str(form.get("base_url", "")).strip(),
            "api_key": _text(form, "api_key"),
            "api_key_env": _text(form, "api_key_env"),
        },
    )
    await use(call, judges.providers_create, body=body)
    return _back("/admin/judges", "provider")


async def provider_delete(call: WebCall) -> Response:
    form = await call.form()
    force = "true" if _checked(form, "force") else "false"
    params = {"provider": call.param("provider")}
    await use(call, judges.providers_delete, params=params, query={"force": force})
    return _back("/admin/judges", "deleted")


async def judge_set(call: WebCall) -> Response:
    form = await call.form()
    body = form_struct(
        judge_wire.JudgeDefaultSet,
        {"provider": str(form.get("provider", "")), "model": str(form.get("model", "")).strip()},
    )
    await use(call, judges.judge_default_set, body=body)
    return _back("/admin/judges", "judge")


async def judge_clear(call: WebCall) -> Response:
    await call.form()
    await use(call, judges.judge_default_clear)
    return _back("/admin/judges", "cleared")


PAGES = [
    Page("GET", "/admin", users_page),
    Page("POST", "/admin/users", user_add),
    Page("POST", "/admin/users/{username}/disable", user_disable),
    Page("POST", "/admin/users/{username}/enable", user_enable),
    Page("GET", "/admin/workspaces", workspaces_page),
    Page("POST", "/admin/workspaces", workspace_create),
    Page("POST", "/admin/workspaces/{workspace}/members", member_add),
    Page("POST", "/admin/workspaces/{workspace}/members/{username}/remove", member_remove),
    Page("POST", "/admin/promotions", promotion_set),
    Page("POST", "/admin/promotions/{workspace}/remove", promotion_remove),
    Page("GET", "/admin/judges", judges_page),
    Page("POST", "/admin/providers", provider_add),
    Page("POST", "/admin/providers/{provider}/delete", provider_delete),
    Page("POST", "/admin/judge", judge_set),
    Page("POST", "/admin/judge/clear", judge_clear),
]
