"""The user docs at ``/docs``: public, since they are how people learn to log in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup
from starlette.responses import Response

from evalkit.web import docs_site
from evalkit.web.docs_site import ORIGIN, DocPage, Line, with_origin
from evalkit.web.page import Page, WebCall


@dataclass
class _Listed:
    name: str
    title: str
    summary: str


@dataclass
class _Hit:
    page: _Listed
    lines: list[tuple[Line, Markup]]


def _origin(call: WebCall) -> str:
    """The server's address as the browser reached it (scheme and host)."""
    url = call.request.url
    return f"{url.scheme}://{url.netloc}"


def _listed(page: DocPage, origin: str) -> _Listed:
    return _Listed(page.name, page.title, page.summary.replace(ORIGIN, origin))


def _context(call: WebCall, **more: Any) -> dict[str, Any]:
    origin = _origin(call)
    pages = [_listed(p, origin) for p in docs_site.site().pages.values()]
    return {"pages": pages, "current": None, "search_text": "", "origin": origin, **more}


async def docs_index(call: WebCall) -> Response:
    site = docs_site.site()
    text = call.request.query_params.get("q", "").strip()[: docs_site.MAX_QUERY]
    origin = _origin(call)
    hits = [
        _Hit(
            _listed(hit.page, origin),
            [(line, with_origin(str(marked), origin)) for line, marked in hit.lines],
        )
        for hit in (site.search(text) if text else [])
    ]
    return call.render("docs.html", **_context(call, search_text=text, hits=hits))


async def docs_page(call: WebCall) -> Response:
    name = call.param("page")
    found = docs_site.site().get(name)
    if found is None:
        return call.render("docs_missing.html", status=404, **_context(call, name=name))
    origin = _origin(call)
    return call.render(
        "docs_page.html",
        **_context(call, current=found, body=with_origin(found.html, origin)),
    )


PAGES = [
    Page("GET", "/docs", docs_index, public=True),
    Page("GET", "/docs/{page}", docs_page, public=True),
]
