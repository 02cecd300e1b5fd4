"""Health, readiness, server info and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from starlette.responses import FileResponse, PlainTextResponse, Response

from evalkit import __version__, distribution
from evalkit.edge.endpoint import Call, Endpoint, openapi_document
from evalkit.errors import ApiError, EvalkitError, NotFound
from evalkit.model import api
from evalkit.sql import migrate


async def healthz(call: Call) -> api.Health:
    return api.Health(status="ok", database="not checked")


class NotReady(ApiError):
    status = 503
    code = "not-ready"


async def readyz(call: Call) -> api.Health:
    expected = migrate.head_revision()
    try:
        async with call.db.connection() as conn:
            row = await conn.one("schema_revision_get")
        current = row["version_num"] if row else None
    except EvalkitError as exc:
        raise NotReady(f"database unreachable: {exc.message}") from None
    if current != expected:
        raise NotReady(
            f"database schema is at {current}, this server needs {expected}; "
            "run `evalkit db upgrade`"
        )
    return api.Health(
        status="ok", database="ok", schema_revision=current, expected_revision=expected
    )


def origin(call: Call) -> str:
    """The server's URL as users reach it: server.public_url, else what this request used."""
    configured = call.settings.server.public_url
    return (configured or str(call.request.base_url)).rstrip("/")


async def cli_info(call: Call) -> api.CliInfo:
    wheel_url = f"{origin(call)}/cli/{distribution.wheel_name()}"
    return api.CliInfo(
        version=__version__,
        install=" ".join(distribution.install_command(wheel_url, uv=True)),
        wheel_url=wheel_url,
        pip_install=" ".join(distribution.pip_command(wheel_url)),
        page_url=f"{origin(call)}/cli",
        pypi_install=f'uv tool install --reinstall "{distribution.PACKAGE}=={__version__}"',
    )


async def cli_page(call: Call) -> Response:
    return PlainTextResponse(distribution.install_page(origin(call)))


async def cli_wheel(call: Call) -> Response:
    if call.param("filename") != distribution.wheel_name():
        raise NotFound(
            f"this server hands out {distribution.wheel_name()} only; GET /cli for it",
            code="no-such-wheel",
        )
    path = await distribution.cli_wheel(call.settings)
    return FileResponse(path, media_type="application/octet-stream", filename=path.name)


async def openapi(call: Call) -> dict[str, Any]:
    return openapi_document(call.request.app.state.endpoints, __version__)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/healthz",
        healthz,
        "Liveness: the process answers",
        returns=api.Health,
        public=True,
        tags=["meta"],
    ),
    Endpoint(
        "GET",
        "/readyz",
        readyz,
        "Readiness: database reachable and schema at head",
        returns=api.Health,
        public=True,
        tags=["meta"],
    ),
    Endpoint(
        "GET",
        "/api/cli",
        cli_info,
        "Server version and the CLI install command",
        returns=api.CliInfo,
        public=True,
        tags=["meta"],
    ),
    Endpoint(
        "GET",
        "/cli",
        cli_page,
        "How to install this server's CLI: the uv and pip commands, as a shell script "
        "(`curl -fsS <this URL> | sh`)",
        public=True,
        tags=["meta"],
    ),
    Endpoint(
        "GET",
        "/cli/{filename}",
        cli_wheel,
        "This server's CLI wheel: `uv tool install <this URL>` or `pip install <this URL>`",
        public=True,
        tags=["meta"],
    ),
    Endpoint(
        "GET", "/api/openapi.json", openapi, "This API as OpenAPI 3.1", public=True, tags=["meta"]
    ),
]
