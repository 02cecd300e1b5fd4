"""try/docker-compose.yml, the try-it stack's `docker compose up`, checked short of Docker
(`docker compose config` too when a docker client is here): the services and their start
order, the image compose/ builds, the server's command as the CLI reads it, the agent
running try/run.sh with every variable it asks for, and the judge's variables required
with a message that says what to set. The local path runs for real in
tests/integration/test_try_stack.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_compose import compose_available

ROOT = Path(__file__).parents[2]
TRY = ROOT / "try"
FILE = TRY / "docker-compose.yml"
JUDGE_ENV = {
    "EVALKIT_TRY_JUDGE_BASE_URL": "http://host.docker.internal:11434/v1",
    "EVALKIT_TRY_JUDGE_MODEL": "llama3.1",
}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load(FILE.read_text())["services"]


@pytest.mark.skipif(not compose_available(), reason="no docker client with compose here")
def test_docker_compose_config_accepts_the_file_and_asks_for_the_judge():
    base = {"PATH": "/usr/bin:/bin:/usr/local/bin"}
    command = ["docker", "compose", "-f", str(FILE), "config", "--quiet"]
    ok = subprocess.run(command, env={**base, **JUDGE_ENV}, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run(command, env=base, capture_output=True, text=True)
    assert missing.returncode != 0 and "EVALKIT_TRY_JUDGE_BASE_URL" in missing.stderr


def test_the_stack_is_postgres_a_migration_the_server_and_the_agent(services):
    assert set(services) == {"postgres", "migrate", "server", "agent"}

    def after(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}

    assert after("migrate") == {"postgres": "service_healthy"}
    assert after("server") == {
        "postgres": "service_healthy",
        "migrate": "service_completed_successfully",
    }
    assert after("agent") == {"server": "service_healthy"}
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_evalkit_services_build_the_deployment_image(services):
    deploy = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    image = deploy["x-evalkit"]["image"]
    for name in ("migrate", "server", "agent"):
        service = services[name]
        assert service["image"] == image, name
        build = service["build"]
        assert (TRY / build["context"] / build["dockerfile"]).resolve() == (
            ROOT / "compose" / "Dockerfile"
        ), name


def test_the_server_command_is_one_the_cli_accepts(services):
    from evalkit.cli import register
    from evalkit.cli.app import app

    register()
    for name, expected in (("migrate", "db_upgrade"), ("server", "server")):
        function, bound, _ = app.parse_args(services[name]["command"], exit_on_error=False)
        assert function.__name__ == expected, name
    _, bound, _ = app.parse_args(services["server"]["command"], exit_on_error=False)
    # One process serves and works the jobs: an external database's default is no worker.
    assert bound.arguments == {"host": "0.0.0.0", "with_worker": True}


def test_the_server_listens_on_loopback_only_and_reaches_a_private_llm(services):
    server = services["server"]
    assert server["ports"] == ["127.0.0.1:${EVALKIT_PORT:-8600}:8600"]
    env = server["environment"]
    assert env["EVALKIT_EGRESS_ALLOW_PRIVATE"] == "true"
    assert env["EVALKIT_SERVER_PUBLIC_URL"] == "http://localhost:${EVALKIT_PORT:-8600}"
    assert env["EVALKIT_ADMIN_PASSWORD"] == "${EVALKIT_ADMIN_PASSWORD:-try-evalkit}"
    assert "host.docker.internal:host-gateway" in server["extra_hosts"]
    # The migration and the server reach the database and share the key; the agent is a
    # client and talks HTTP only.
    for name in ("migrate", "server"):
        env = services[name]["environment"]
        assert env["EVALKIT_DATABASE_URL"].endswith("@postgres:5432/evalkit"), name
        assert env["EVALKIT_ENCRYPTION_KEY"].startswith("${EVALKIT_ENCRYPTION_KEY:-"), name


def test_the_agent_runs_run_sh_with_everything_it_asks_for(services):
    agent = services["agent"]
    assert agent["entrypoint"] == ["sh", "/try/run.sh"]
    assert agent["command"] == []
    assert "./:/try:ro" in agent["volumes"]
    assert agent["restart"] == "no"
    env = agent["environment"]
    script = (TRY / "run.sh").read_text()
    needed = set(re.findall(r"^need (\w+) ", script, re.M))
    assert needed == {
        "EVALKIT_SERVER_URL",
        "EVALKIT_PASSWORD",
        "EVALKIT_TRY_JUDGE_BASE_URL",
        "EVALKIT_TRY_JUDGE_MODEL",
    }
    assert needed <= set(env)
    assert env["EVALKIT_SERVER_URL"] == "http://server:8600"
    # The agent logs in with the password the server's first start gave admin.
    assert env["EVALKIT_PASSWORD"] == services["server"]["environment"]["EVALKIT_ADMIN_PASSWORD"]
    for name in JUDGE_ENV:
        assert env[name].startswith(f"${{{name}:?set {name} to "), name
        assert "try/README.md" in env[name], name
    assert env["EVALKIT_TRY_JUDGE_API_KEY"] == "${EVALKIT_TRY_JUDGE_API_KEY:-}"
    for optional in re.findall(r"\$\{(\w+):-", script):
        assert optional in env or optional == "EVALKIT_TRY_JUDGE_API_KEY", optional


def test_the_sample_is_a_repository_the_sdk_reads():
    from evalkit.cases.project import load_project

    sample = TRY / "sample"
    project = load_project(sample / "evalkit.yaml")
    assert (sample / project.cases_dir / "arithmetic").is_dir()
    cases = sorted((sample / "cases" / "arithmetic").glob("*.yaml"))
    assert len(cases) == 4
    for case in cases:
        assert "rubric" in yaml.safe_load(case.read_text())["evaluators"]["judge"], case.name
    agent = (sample / "agent.py").read_text()
    assert 'AGENT = "sample-agent"' in agent and "sample-agent" in (TRY / "run.sh").read_text()
