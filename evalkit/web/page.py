"""The web UI's machinery: pages as data, the session cookie, CSRF, templates, and calls
into the API handlers.

Pages never query the database themselves: they call the same handlers the JSON API
serves (``use``), with the same actor, so a page cannot see or do more than the API allows
that user. The session cookie holds an ordinary login token; every form carries a CSRF
value derived from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from evalkit.auth.access import ANONYMOUS, Actor
from evalkit.auth.tokens import values_match
from evalkit.db import Database
from evalkit.edge.endpoint import Call, Handler
from evalkit.edge.refusals import REFUSED, Refusal, refusal_for
from evalkit.errors import BadRequest, Forbidden, Unauthorized
from evalkit.store.accounts import resolve_login_token

SESSION_COOKIE = "evalkit_session"
CSRF_FIELD = "csrf"
HERE = Path(__file__).parent
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


def _ago(value: datetime | None) -> str:
    if value is None:
        return "—"
    seconds = (datetime.now(UTC) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _score(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _to_plain(value: Any) -> Any:
    """A msgspec Struct (or a list of them) as plain data, for templates that index dicts."""
    return msgspec.to_builtins(value)


templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters.update(ago=_ago, when=_when, score=_score, plain=_to_plain, q=quote)


def csrf_value(session_token: str) -> str:
    """Derived from the session token, which only the browser holding the cookie knows:
    another site can make the browser send the cookie but cannot read this value."""
    return hashlib.sha256(b"evalkit-csrf\0" + session_token.encode()).hexdigest()


@dataclass
class WebCall(Call):
    """One page request: a ``Call`` (so API handlers accept it) plus the session."""

    session_token: str | None = None

    @property
    def csrf(self) -> str:
        return csrf_value(self.session_token) if self.session_token else ""

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = templates.get_template(template).render(
            me=self.actor,
            csrf=self.csrf,
            path=self.request.url.path,
            query=self.request.query_params,
            **context,
        )
        return HTMLResponse(
            html, status, headers={"content-security-policy": CONTENT_SECURITY_POLICY}
        )

    def refusal_page(self, refusal: Refusal) -> HTMLResponse:
        response = self.render(
            "error.html", status=refusal.status, code=refusal.code, message=refusal.message
        )
        response.headers.update(refusal.headers)
        return response

    async def form(self) -> dict[str, Any]:
        """The posted form, CSRF-checked: a field that names several values gives a list."""
        form = await self.request.form()
        data: dict[str, Any] = {}
        for key in form:
            values = [v for v in form.getlist(key) if isinstance(v, str)]
            data[key] = values if len(values) > 1 else (values[0] if values else "")
        sent = data.pop(CSRF_FIELD, "")
        if not (self.session_token and values_match(str(sent), self.csrf)):
            raise Forbidden(
                "csrf",
                "the form's CSRF value is missing or stale; reload the page and submit again",
            )
        return data


class _GivenBody(Call):
    """A Call whose body is already decoded (a form turned into the endpoint's struct)."""

    given: Any = None

    async def payload(self) -> Any:
        return self.given


async def use(
    call: WebCall,
    handler: Handler,
    *,
    params: dict[str, Any] | None = None,
    query: dict[str, Any] | None = None,
    body: Any = None,
) -> Any:
    """Call an API handler as this page's user, with its own path params and query."""
    scope = dict(call.request.scope)
    scope["path_params"] = {k: str(v) for k, v in (params or {}).items()}
    pairs = {k: v for k, v in (query or {}).items() if v not in (None, "", [])}
    scope["query_string"] = urlencode(pairs, doseq=True).encode()
    sub = _GivenBody(request=Request(scope), actor=call.actor, db=call.db)
    sub.given = body
    return await handler(sub)


def form_struct(struct: type, data: dict[str, Any]) -> Any:
    """A form as an API body struct; a field that does not fit is a 400 naming it."""
    try:
        return msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"the form does not fit {struct.__name__}: {exc}") from None


PageHandler = Callable[[WebCall], Awaitable[Response]]


@dataclass
class Page:
    """One web route. Pages need a login unless ``public``; POSTs need the CSRF value."""

    method: str
    path: str
    handler: PageHandler
    public: bool = False

    def route(self) -> Route:
        async def endpoint(request: Request) -> Response:
            return await self._serve(request)

        return Route(
            self.path, endpoint, methods=[self.method], name=f"page_{self.handler.__name__}"
        )

    async def _serve(self, request: Request) -> Response:
        db: Database = request.app.state.db
        call = WebCall(request=request, actor=ANONYMOUS, db=db)
        try:
            await _authenticate(call)
            if not self.public and call.actor.is_anonymous:
                return login_redirect(request)
            return await self.handler(call)
        except Unauthorized:  # a browser is sent to the login page, not shown a 401
            return login_redirect(request, expired=True)
        except REFUSED as exc:
            return call.refusal_page(refusal_for(exc))


async def _authenticate(call: WebCall) -> None:
    token = call.request.cookies.get(SESSION_COOKIE)
    if not token:
        return
    async with call.db.connection() as conn:
        resolved = await resolve_login_token(conn, token)
    call.actor = resolved.actor
    call.token_id = resolved.token_id
    call.token_expires_at = resolved.expires_at
    call.session_token = token


def login_redirect(request: Request, *, expired: bool = False) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    params = {"next": target} if request.method == "GET" else {}
    if expired:
        params["expired"] = "1"
    response = RedirectResponse(f"/login?{urlencode(params)}" if params else "/login", 303)
    if expired:
        response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def safe_next(target: str | None) -> str:
    """Only a path on this server: an open redirect would make the login page a phishing aid.
    Control characters are refused too: browsers drop tabs and newlines from a URL, so
    ``/<TAB>/evil.example`` would read as ``//evil.example``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return "/"
    return target


def cookies_secure(request: Request) -> bool:
    """Whether cookies get the Secure flag: the request came over https, or users reach the
    server at an https public_url (TLS ending at a proxy in front, which speaks plain HTTP
    to the edge)."""
    public = request.app.state.settings.server.public_url or ""
    return request.url.scheme == "https" or public.lower().startswith("https://")


def from_another_site(request: Request) -> bool:
    """A browser says so (Sec-Fetch-Site) when another site's page sent this request."""
    return request.headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site")


def set_session(response: Response, request: Request, token: str, max_age: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="lax",
        secure=cookies_secure(request),
    )


def actor_name(actor: Actor) -> str:
    return actor.username or "agent token"
