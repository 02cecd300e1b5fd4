"""Installing the CLI from the server as the docs say: <server>/cli is the install page
(the uv and pip commands with the wheel's URL, and a shell script that runs them), and the
URL it names installs with the real uv and the real pip.

Neither installer takes <server>/cli itself: uv refuses a URL that does not end in a wheel
or archive file name before it sends a request, and pip unpacks what a redirect from it
serves as a source tree. So the page names the URL that ends in the wheel's file name."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from evalkit import __version__
from evalkit.distribution import install_page, wheel_name


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "VIRTUAL_ENV"))}
    return env | extra


def python_with_pip() -> str:
    """A python3 that has pip, outside this project's venv (which has none)."""
    for folder in os.environ["PATH"].split(os.pathsep):
        candidate = Path(folder) / "python3"
        if ".venv" in folder or not candidate.is_file():
            continue
        probe = subprocess.run([str(candidate), "-m", "pip", "--version"], capture_output=True)
        if probe.returncode == 0:
            return str(candidate)
    pytest.fail("no python3 with pip on PATH: the pip install test needs one")


def run(command: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"$ {' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_page_names_both_commands_and_is_a_shell_script(server):
    page = httpx.get(f"{server.url}/cli")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/plain")
    wheel_url = f"{server.url}/cli/{wheel_name()}"
    assert f"#   uv tool install --reinstall {wheel_url}\n" in page.text
    assert f"#   python3 -m pip install --upgrade {wheel_url}\n" in page.text
    assert f"curl -fsS {server.url}/cli | sh" in page.text
    assert page.text == install_page(server.url)
    syntax = subprocess.run(["sh", "-n"], input=page.text, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    info = httpx.get(f"{server.url}/api/cli").json()
    assert info["page_url"] == f"{server.url}/cli"
    assert info["pip_install"] == f"python3 -m pip install --upgrade {wheel_url}"


def test_the_page_quotes_a_public_url_it_did_not_choose():
    page = install_page("https://evals.example.com/x'y")
    assert "wheel='https://evals.example.com/x'\"'\"'y/cli/" in page


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is the installer under test")
def test_uv_installs_the_url_the_page_names(server, tmp_path):
    wheel_url = f"{server.url}/cli/{wheel_name()}"
    target = tmp_path / "uv-target"
    run(["uv", "pip", "install", "--no-deps", "--target", str(target), wheel_url], clean_env())
    assert (target / "evalkit" / "__init__.py").is_file()
    assert (target / f"evalkit_py-{__version__}.dist-info").is_dir()


def test_pip_installs_the_url_the_page_names(server, tmp_path):
    wheel_url = f"{server.url}/cli/{wheel_name()}"
    target = tmp_path / "pip-target"
    command = [python_with_pip(), "-m", "pip", "install", "--no-deps", "--target", str(target)]
    run([*command, wheel_url], clean_env())
    assert (target / "evalkit" / "__init__.py").is_file()
    assert (target / f"evalkit_py-{__version__}.dist-info").is_dir()


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is the installer under test")
def test_curl_the_page_into_sh_installs_a_working_cli_with_uv(server, tmp_path):
    env = clean_env(
        UV_TOOL_DIR=str(tmp_path / "tools"),
        UV_TOOL_BIN_DIR=str(tmp_path / "bin"),
    )
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    run(["sh", "-c", f"curl -fsS {server.url}/cli | sh"], env)
    installed = run([str(tmp_path / "bin" / "evalkit"), "--version"], env)
    assert installed.stdout.strip() == __version__


def test_the_page_falls_back_to_pip_without_uv(server, tmp_path):
    venv = tmp_path / "venv"
    run([python_with_pip(), "-m", "venv", str(venv)], clean_env())
    # No uv on PATH: only the venv's python3 and what curl and sh need. PIP_NO_DEPS keeps
    # the test to the wheel itself (its dependencies come from the index, as usual).
    env = clean_env(PATH=f"{venv / 'bin'}:/usr/bin:/bin", PIP_NO_DEPS="1")
    assert shutil.which("uv", path=env["PATH"]) is None
    run(["sh", "-c", f"curl -fsS {server.url}/cli | sh"], env)
    where = [str(venv / "bin" / "python3"), "-c", "import evalkit; print(evalkit.__file__)"]
    site = run(where, env, cwd=tmp_path)  # not the checkout, whose evalkit/ would shadow it
    assert site.stdout.startswith(str(venv)), site.stdout


def test_the_page_says_what_to_install_when_neither_installer_is_there(server, tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    page = httpx.get(f"{server.url}/cli").text
    done = subprocess.run(
        ["/bin/sh"], input=page, env={"PATH": str(empty)}, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "neither uv nor python3 with pip is on PATH; install uv" in done.stderr
