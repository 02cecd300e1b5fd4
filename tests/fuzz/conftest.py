"""Fuzz tests: one hypothesis profile for the folder, and one server per module for the
tests that send many requests (a server per generated example would cost more than the
examples do).

The profile is derandomized, so the suite sees the same examples on every run and CI
stays stable. For a longer, random hunt set ``EVALKIT_FUZZ_EXAMPLES`` (examples per test,
e.g. 2000) and ``EVALKIT_FUZZ_RANDOM=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import ADMIN_PASSWORD, RunningServer, start_server, with_database

EXAMPLES = int(os.environ.get("EVALKIT_FUZZ_EXAMPLES", "0")) or None
"""Examples per test when set; each test picks its own modest default otherwise."""

settings.register_profile(
    "evalkit-fuzz",
    database=None,  # no .hypothesis/ folder in the work tree
    deadline=None,  # two shared cores: timing says nothing here
    derandomize=not os.environ.get("EVALKIT_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("evalkit-fuzz")


def examples(default: int) -> int:
    """``default``, unless ``EVALKIT_FUZZ_EXAMPLES`` asks for more (or fewer)."""
    return EXAMPLES or default


@pytest.fixture(scope="module")
def module_server(
    request: pytest.FixtureRequest, pg_admin_url: str, template_url: str, tmp_path_factory
) -> Iterator[RunningServer]:
    """A real edge on its own database, shared by one module's tests."""
    name = f"evalkit_fuzz_{request.module.__name__.rsplit('.', 1)[-1]}_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE evalkit_template")
    running = start_server(with_database(pg_admin_url, name), tmp_path_factory.mktemp("fuzz"))
    try:
        yield running
    finally:
        running.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def login(server: RunningServer, username: str = "admin", password: str = ADMIN_PASSWORD) -> str:
    response = httpx.post(
        f"{server.url}/api/auth/login", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    return response.json()["token"]


@pytest.fixture(scope="module")
def module_admin_token(module_server: RunningServer) -> str:
    return login(module_server)
