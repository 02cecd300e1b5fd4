"""compose/: the Dockerfile, docker-compose.yml, the sample config and the proxy.

`docker compose config` validates the file when a docker client with compose is present;
the YAML checks below run everywhere and pin what the deployment relies on: images and
builds, commands the CLI accepts, start order by health, replicas, the read-only config,
secrets from the environment, and a non-root runtime stage that holds only the wheel and
the entry point. The entry point script itself runs here under sh, so the seed's
`docker compose run --rm server evalkit ...` is checked end to end short of Docker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit import __version__
from evalkit.config import load_settings
from evalkit.distribution import wheel_name

ROOT = Path(__file__).parents[2]
COMPOSE = ROOT / "compose"
CONFIG_IN_CONTAINER = "/etc/evalkit/config.yaml"
EVALKIT_SERVICES = ("migrate", "server", "worker")
ENTRYPOINT = COMPOSE / "entrypoint.sh"
SECRETS = {
    "POSTGRES_PASSWORD": "pg-secret",
    "EVALKIT_ENCRYPTION_KEY": "A" * 43 + "=",
    "EVALKIT_ADMIN_PASSWORD": "first-admin-pw",
}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["services"]


def compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not compose_available(), reason="no docker client with compose here")
def test_docker_compose_config_accepts_the_file():
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE / "docker-compose.yml"), "config", "--quiet"],
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", **SECRETS},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_every_service_has_an_image_or_a_build(services):
    assert set(services) == {"postgres", "migrate", "server", "worker", "proxy"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["proxy"]["image"].startswith("caddy:")
    for name in EVALKIT_SERVICES:
        build = services[name]["build"]
        assert (COMPOSE / build["context"] / build["dockerfile"]).resolve() == (
            COMPOSE / "Dockerfile"
        ), name
        assert services[name]["image"].startswith("evalkit:"), name


def test_evalkit_commands_are_ones_the_cli_accepts(services):
    from evalkit.cli import register
    from evalkit.cli.app import app

    register()
    expected = {
        "migrate": (["db", "upgrade"], "db_upgrade", {}),
        "server": (
            ["server", "--host", "0.0.0.0", "--no-worker"],
            "server",
            {"host": "0.0.0.0", "with_worker": False},
        ),
        "worker": (["worker"], "worker", {}),
    }
    for name, (command, function_name, arguments) in expected.items():
        assert services[name]["command"] == command, name
        function, bound, _ = app.parse_args(command, exit_on_error=False)
        assert function.__name__ == function_name, name
        assert bound.arguments == arguments, name
    assert services["migrate"]["restart"] == "no"  # one shot


def test_start_order_waits_on_health_and_on_the_migration(services):
    def conditions(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}

    assert conditions("migrate") == {"postgres": "service_healthy"}
    for name in ("server", "worker"):
        assert conditions(name) == {
            "postgres": "service_healthy",
            "migrate": "service_completed_successfully",
        }, name
    assert conditions("proxy") == {"server": "service_healthy"}


def test_healthchecks(services):
    postgres = services["postgres"]["healthcheck"]["test"]
    assert "pg_isready" in " ".join(postgres)
    # The server inherits the image's HEALTHCHECK on /healthz; the others do not serve HTTP.
    assert "healthcheck" not in services["server"]
    for name in ("migrate", "worker"):
        assert services[name]["healthcheck"] == {"disable": True}, name


def test_two_server_replicas_behind_the_published_port(services):
    server, proxy = services["server"], services["proxy"]
    assert server["deploy"]["replicas"] == 2
    assert "ports" not in server  # two replicas cannot publish one host port
    assert server["expose"] == ["8600"]
    assert proxy["ports"] == ["${EVALKIT_PORT:-8600}:8600"]
    assert "./Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]
    caddyfile = (COMPOSE / "Caddyfile").read_text()
    assert re.search(r"dynamic a \{\s*name server\s*port 8600", caddyfile)
    assert ":8600 {" in caddyfile


def test_config_mounted_read_only_and_secrets_from_the_environment(services):
    for name in EVALKIT_SERVICES:
        service = services[name]
        assert f"./config.yaml:{CONFIG_IN_CONTAINER}:ro" in service["volumes"], name
        assert "evalkit-data:/var/lib/evalkit" in service["volumes"], name
        env = service["environment"]
        assert env["EVALKIT_CONFIG"] == CONFIG_IN_CONTAINER, name
        assert "${POSTGRES_PASSWORD:?" in env["EVALKIT_DATABASE_URL"], name
        assert env["EVALKIT_ENCRYPTION_KEY"].startswith("${EVALKIT_ENCRYPTION_KEY:?"), name
    assert services["server"]["environment"]["EVALKIT_ADMIN_PASSWORD"].startswith(
        "${EVALKIT_ADMIN_PASSWORD"
    )
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    # Every variable the file reads is in the example .env, and .env is never committed.
    used = set(re.findall(r"\$\{(\w+)", (COMPOSE / "docker-compose.yml").read_text()))
    example = (COMPOSE / ".env.example").read_text()
    listed = set(re.findall(r"^(\w+)=", example, flags=re.M))
    assert used - {"EVALKIT_IMAGE_TAG"} <= listed, used - listed
    assert ".env" in (COMPOSE / ".gitignore").read_text().split()


def test_the_sample_config_loads_and_holds_no_secret():
    path = COMPOSE / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    assert "encryption_key" not in raw and "url" not in raw.get("database", {})
    env = {
        "EVALKIT_DATABASE_URL": "postgresql://evalkit:pg-secret@postgres:5432/evalkit",
        "EVALKIT_ENCRYPTION_KEY": SECRETS["EVALKIT_ENCRYPTION_KEY"],
    }
    settings = load_settings(path, env=env)
    assert settings.server.host == "0.0.0.0" and settings.server.port == 8600
    assert settings.data_dir == "/var/lib/evalkit"
    assert settings.resolved_blob_url == "file:///var/lib/evalkit/blobs"
    assert settings.database.url == env["EVALKIT_DATABASE_URL"]


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions as (KEYWORD, arguments), continuation lines joined."""
    text = (COMPOSE / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", args.strip(), flags=re.I)
            assert match, f"every stage is named: {line}"
            current = stages.setdefault(match[2], [])
        current.append((keyword, " ".join(args.split())))
    return stages


def test_dockerfile_builds_the_wheel_with_uv_then_installs_only_the_wheel():
    stages = dockerfile_stages()
    assert list(stages) == ["build", "runtime"]
    build = " ".join(f"{k} {a}" for k, a in stages["build"])
    assert "EVALKIT_PURE_WHEEL=1 uv build --wheel --out-dir /dist" in build
    assert "uv export --quiet --frozen --no-dev --no-emit-project" in build

    runtime = stages["runtime"]
    copies = [a for k, a in runtime if k in ("COPY", "ADD")]
    # From the source tree only the entry point script; the rest is the built wheel.
    assert copies == [
        "--from=build /dist/*.whl /opt/evalkit/cli/",
        "--chmod=0755 compose/entrypoint.sh /usr/local/bin/evalkit-entrypoint",
    ]
    runs = " ".join(a for k, a in runtime if k == "RUN")
    assert "pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.txt" in runs
    assert "pip install --no-cache-dir --no-deps /opt/evalkit/cli/*.whl" in runs
    assert "from=build,source=/dist/requirements.txt" in runs
    assert "uv" not in runs.split()
    envs = " ".join(a for k, a in runtime if k == "ENV")
    assert "EVALKIT_SERVER_CLI_WHEEL_DIR=/opt/evalkit/cli" in envs


def test_dockerfile_runs_as_a_non_root_user_with_a_healthcheck():
    runtime = dockerfile_stages()["runtime"]
    users = [a for k, a in runtime if k == "USER"]
    assert users == ["10001:10001"]
    assert "useradd --system --uid 10001" in " ".join(a for k, a in runtime if k == "RUN")
    keywords = [k for k, _ in runtime]
    # USER comes after every RUN: nothing at run time happens as root.
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    assert ("EXPOSE", "8600") in runtime
    health = next(a for k, a in runtime if k == "HEALTHCHECK")
    assert "http://127.0.0.1:8600/healthz" in health
    assert ("ENTRYPOINT", '["evalkit-entrypoint"]') in runtime
    assert ("CMD", '["server", "--host", "0.0.0.0"]') in runtime


def test_build_context_is_limited_to_what_the_image_needs():
    ignore = (COMPOSE / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:8] == [
        "*",
        "!pyproject.toml",
        "!uv.lock",
        "!README.md",
        "!hatch_build.py",
        "!evalkit",
        "!docs",
        "!compose/entrypoint.sh",
    ]
    for needed in BUILD_CONTEXT:
        assert (ROOT / needed).exists(), needed


BUILD_CONTEXT = ("pyproject.toml", "uv.lock", "README.md", "hatch_build.py", "evalkit", "docs")
"""What the image's build stage copies in (entrypoint.sh goes to the runtime stage)."""


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv builds the wheel")
def test_the_build_stage_makes_the_pure_wheel_the_server_hands_out(tmp_path):
    """The build stage's wheel, built here from only what the stage copies in: a wheel for
    any platform (the server serves it as the CLI), for whatever compiler the stage has."""
    stages = dockerfile_stages()
    copies = " ".join(a for k, a in stages["build"] if k == "COPY" and "--from" not in a)
    for name in BUILD_CONTEXT:
        assert name in copies, f"the build stage does not copy {name}"
        source, target = ROOT / name, tmp_path / "src" / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    env = {**os.environ, "EVALKIT_PURE_WHEEL": "1"}
    subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(tmp_path / "src")],
        check=True,
        capture_output=True,
        env=env,
    )
    assert [p.name for p in (tmp_path / "dist").glob("*.whl")] == [wheel_name()]


def test_deploy_doc_yaml_parses_and_the_collector_recipe_reaches_the_collector():
    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)]
    collector = next(b for b in blocks if "exporters" in b)
    exporter = collector["exporters"]["otlphttp/evalkit"]
    assert exporter["traces_endpoint"].endswith("/api/otel/v1/traces")
    assert exporter["headers"]["Authorization"] == "Bearer ${env:EVALKIT_OTEL_TOKEN}"
    assert re.fullmatch(r"[\w-]+@[\w-]+", exporter["headers"]["X-Evalkit-Agent"])
    traces = collector["service"]["pipelines"]["traces"]
    assert "otlphttp/evalkit" in traces["exporters"]
    assert set(traces["exporters"]) <= set(collector["exporters"])
    assert set(traces["receivers"]) <= set(collector["receivers"])
    assert set(traces["processors"]) <= set(collector["processors"])
    # Only the traces pipeline: the collector answers 404 to metrics and logs.
    assert set(collector["service"]["pipelines"]) == {"traces"}


def entrypoint(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    """The image's entry point as Docker runs it: the script with the command's arguments."""
    return subprocess.run(
        ["/bin/sh", str(ENTRYPOINT), *args],
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def recording_evalkit(tmp_path: Path) -> str:
    """A PATH whose `evalkit` prints each argument it gets on a line of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "evalkit"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


@pytest.mark.parametrize(
    "command",
    [
        ["evalkit", "db", "status"],  # the seed: docker compose run --rm server evalkit db status
        ["db", "status"],  # the image's own commands, as the services' `command:` give them
    ],
)
def test_the_entrypoint_runs_evalkit_with_or_without_the_word(recording_evalkit, command):
    done = entrypoint(*command, path=recording_evalkit)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["db", "status"]


def test_the_entrypoint_keeps_arguments_whole(recording_evalkit):
    args = ["users", "add", "ci bot", "", "--role=writer"]
    done = entrypoint("evalkit", *args, path=recording_evalkit)
    assert done.stdout.split("\n")[:-1] == args
    # Only a leading `evalkit` is the command's name; a later one is an argument.
    done = entrypoint("agents", "show", "evalkit", path=recording_evalkit)
    assert done.stdout.splitlines() == ["agents", "show", "evalkit"]


def test_the_entrypoint_runs_the_real_cli(tmp_path):
    bin_dir = Path(sys.executable).parent  # this project's evalkit, as the image has its own
    done = entrypoint("evalkit", "--version", path=f"{bin_dir}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __version__


def test_the_entrypoint_says_so_when_evalkit_is_missing(tmp_path):
    done = entrypoint("evalkit", "--version", path=str(tmp_path))
    assert done.returncode == 127
    assert "evalkit" in done.stderr


def test_compose_run_server_evalkit_reaches_the_cli_command(services, recording_evalkit):
    """`docker compose run --rm server evalkit db status`: the service exists, builds the
    image whose entry point is the script, and the words after the service name reach the
    CLI as the `db status` command (the run replaces the service's `command:`)."""
    from evalkit.cli import register
    from evalkit.cli.app import app

    register()
    assert services["server"]["build"]["dockerfile"] == "compose/Dockerfile"
    runtime = dict(dockerfile_stages()["runtime"])
    assert runtime["ENTRYPOINT"] == '["evalkit-entrypoint"]'
    for words in (["evalkit", "db", "status"], ["evalkit", "users", "add", "alice"]):
        reached = entrypoint(*words, path=recording_evalkit).stdout.splitlines()
        function, _, _ = app.parse_args(reached, exit_on_error=False)
        assert function.__name__ == "_".join(words[1:3]), words
    # And `docker compose up` keeps working: each service's command goes through it too.
    for name in EVALKIT_SERVICES:
        reached = entrypoint(*services[name]["command"], path=recording_evalkit).stdout
        assert reached.splitlines() == services[name]["command"], name
