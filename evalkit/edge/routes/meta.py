"""Health, readiness, server info and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from evalkit import __version__
from evalkit.edge.endpoint import Call, Endpoint, openapi_document
from evalkit.errors import ApiError, EvalkitError
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


async def cli_info(call: Call) -> api.CliInfo:
    return api.CliInfo(version=__version__, install=f'uv tool install "evalkit-py=={__version__}"')


async def openapi(call: Call) -> dict[str, Any]:
    from evalkit.edge.routes import ENDPOINTS

    return openapi_document(ENDPOINTS, __version__)


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
        "GET", "/api/openapi.json", openapi, "This API as OpenAPI 3.1", public=True, tags=["meta"]
    ),
]
