"""Health, readiness, server info and the generated OpenAPI document."""

from __future__ import annotations

import httpx
import psycopg

from evalkit import __version__
from evalkit.edge.routes import ENDPOINTS
from evalkit.sql import migrate


def test_health_and_ready(server):
    assert httpx.get(f"{server.url}/healthz").json()["status"] == "ok"
    ready = httpx.get(f"{server.url}/readyz").json()
    assert ready["database"] == "ok"
    assert ready["schema_revision"] == migrate.head_revision()


def test_ready_reports_a_stale_schema(server):
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    r = httpx.get(f"{server.url}/readyz")
    assert r.status_code == 503
    assert "evalkit db upgrade" in r.json()["error"]["message"]


def test_cli_info(server):
    info = httpx.get(f"{server.url}/api/cli").json()
    assert info["version"] == __version__
    assert __version__ in info["install"]


def test_openapi_covers_every_endpoint(server):
    doc = httpx.get(f"{server.url}/api/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    for ep in ENDPOINTS:
        op = doc["paths"][ep.path][ep.method.lower()]
        assert op["summary"] == ep.summary
        if ep.body is not None:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.split("/")[-1] in doc["components"]["schemas"]
    user_create = doc["components"]["schemas"]["UserCreate"]
    assert user_create["required"] == ["username"]
    assert set(user_create["properties"]) == {"username", "password", "is_admin", "subject"}


def test_cli_help_and_version(cli):
    top = cli("--help")
    assert top.code == 0
    for command in ("server", "worker", "db", "login", "logout", "whoami", "users", "workspaces"):
        assert command in top.out
    for args in (
        ["users", "add", "--help"],
        ["workspaces", "members", "add", "--help"],
        ["server", "--help"],
        ["login", "--help"],
    ):
        result = cli(*args)
        assert result.code == 0 and "Usage:" in result.out, args
    assert cli("--version").out.strip() == __version__
