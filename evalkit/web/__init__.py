"""The web UI: server-rendered pages over the same handlers and access rules as the API."""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from evalkit.web.page import HERE, Page
from evalkit.web.pages import (
    admin,
    agents,
    datasets,
    docs,
    experiments,
    home,
    labelling,
    monitors,
    runs,
    sso,
    traces,
)

PAGES: list[Page] = [
    *home.PAGES,
    *sso.PAGES,
    *datasets.PAGES,
    *agents.PAGES,
    *admin.PAGES,
    *docs.PAGES,
    *traces.PAGES,
    *experiments.PAGES,
    *runs.PAGES,
    *monitors.PAGES,
    *labelling.PAGES,
]


def routes() -> list[BaseRoute]:
    static = StaticFiles(directory=HERE / "static")
    return [*(page.route() for page in PAGES), Mount("/static", static, name="static")]
