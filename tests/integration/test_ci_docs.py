"""docs/ci.md: the GitHub Actions workflow is checked for shape, then its steps run as a
script, in order, against a real server, as CI would run them: install the server's CLI
from /cli with uv, log in as the machine user, lint on a pull request, sync on a push. The
script for other CI systems runs the same way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.datasets_helpers import Repo, simple_case

CI_DOC = Path(__file__).parents[2] / "docs" / "ci.md"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
ALLOWED_CONTEXTS = ("vars.", "secrets.", "github.")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", CI_DOC.read_text(), re.S)


def workflow() -> dict:
    (text,) = blocks("yaml")
    return yaml.safe_load(text)


def test_the_workflow_has_the_shape_actions_needs():
    flow = workflow()
    # YAML 1.1 reads the key `on` as True; GitHub reads it as the trigger list.
    triggers = flow.get("on", flow.get(True))
    assert set(triggers) == {"pull_request", "push"}
    assert triggers["push"]["branches"] == ["main"]
    (job,) = flow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    for step in job["steps"]:
        assert ("uses" in step) != ("run" in step), step
        assert set(step) <= {"name", "uses", "run", "if", "with", "env"}, step
        if "uses" in step:
            assert re.fullmatch(r"[\w-]+/[\w-]+@v\d+", step["uses"]), step["uses"]
        if "if" in step:
            assert re.fullmatch(r"github\.event_name == '(pull_request|push)'", step["if"])
    text = yaml.safe_dump(flow)
    for expression in EXPRESSION.findall(text):
        assert expression.startswith(ALLOWED_CONTEXTS), expression
    assert "secrets.EVALKIT_PASSWORD" in text and "EVALKIT_TOKEN" not in text


@pytest.fixture
def ci_machine(server, cli, admin_token, tmp_path):
    """A CI runner: a checkout with a suite, the machine user, an isolated HOME and uv."""
    if shutil.which("uv") is None or shutil.which("jq") is None or shutil.which("curl") is None:
        pytest.fail("the CI docs test needs uv, jq and curl on PATH (GitHub's runners have them)")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    made = cli("users", "add", "ci-bot", "--json", token=admin_token)
    assert made.code == 0, made.err
    assert cli("workspaces", "create", "dev", token=admin_token).code == 0
    added = cli(
        "workspaces", "members", "add", "dev", "ci-bot", "--role", "writer", token=admin_token
    )
    assert added.code == 0, added.err
    checkout = tmp_path / "checkout"
    repo = Repo(checkout / "evals")
    repo.case("finance", "revenue", simple_case("What was Q3 revenue?", "4.2M"))
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=checkout, check=True)
    subprocess.run(["git", "add", "."], cwd=checkout, check=True)
    subprocess.run(
        ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-qm", "cases"],
        cwd=checkout,
        check=True,
    )
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "VIRTUAL_ENV"))}
    env |= {
        "HOME": str(home),
        "UV_TOOL_DIR": str(home / "tools"),
        "UV_TOOL_BIN_DIR": str(home / "bin"),
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
        "PATH": f"{home / 'bin'}:{os.environ['PATH']}",
        "EVALKIT_SERVER_URL": server.url,
        "EVALKIT_PASSWORD": made.json["generated_password"],
        "SUITE": "evals/cases/finance",
        "WORKSPACE": "dev",
    }
    # The project's own evalkit must not be what runs: only the one the job installs.
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if ".venv" not in p)
    return checkout, env


def run_step(command: str, checkout: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_workflow_steps_run_against_a_real_server(server, admin_token, ci_machine):
    checkout, env = ci_machine
    (job,) = workflow()["jobs"].values()
    for event in ("pull_request", "push"):
        for step in job["steps"]:
            if "run" not in step or step.get("if", event) not in (
                event,
                f"github.event_name == '{event}'",
            ):
                continue
            run_step(step["run"], checkout, env)
    installed = subprocess.run(["which", "evalkit"], env=env, capture_output=True, text=True)
    assert installed.stdout.startswith(env["UV_TOOL_BIN_DIR"]), installed.stdout
    headers = {"Authorization": f"Bearer {admin_token}"}
    dataset = httpx.get(f"{server.url}/api/workspaces/dev/datasets/finance", headers=headers)
    assert dataset.status_code == 200, dataset.text
    body = dataset.json()
    assert body["cases"] == 1
    assert body["last_sync"]["actor"] == "ci-bot"
    assert body["last_sync"]["branch"] == "main"


def test_the_script_for_other_ci_systems_runs(server, ci_machine):
    checkout, env = ci_machine
    (script,) = blocks("sh")
    (checkout / "evals.sh").write_text(script)
    # (lint is the workflow test's; one install is enough to show the script works)
    out = run_step("bash evals.sh evals/cases/finance sync", checkout, env)
    assert "synced finance@dev" in out
