"""``evalkit try``: the whole product on one machine, end to end, in one command.

An embedded PostgreSQL, the migrations, an admin, the edge and a worker in this process; a
shared workspace ``demo`` with the sample suite synced into it; two agents: the reference
harness (driven by the server through the Harness API) and a traced in-process agent (run
by the SDK, trajectories from its spans); one experiment each, scored by the built-in
checks (and the LLM judge when one is configured through the environment); the scores as
a table and the web UI's address.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from evalkit import serve
from evalkit.config import Settings
from evalkit.errors import EvalkitError

WORKSPACE = "demo"
DATASET = "arithmetic"
HARNESS_AGENT = "calculator"
TRACED_AGENT = "traced-calculator"
PASSWORD_FILE = "try-admin-password"
DEFAULT_PORT = 8600
JUDGE_ENV = ("EVALKIT_TRY_JUDGE_BASE_URL", "EVALKIT_TRY_JUDGE_MODEL", "EVALKIT_TRY_JUDGE_API_KEY")
JUDGE_RUBRIC = (
    "Pass when the answer gives the expected result (or, for a question with no arithmetic, "
    "answers it politely); fail otherwise."
)


@dataclass
class DemoResult:
    url: str
    password: str | None
    """The admin password when this run created it (shown once), else None."""
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Agent name -> {id, url, by_state, scores: ExperimentScores JSON}."""
    judged: bool = False


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("evalkit")) / "try"


def _admin_password(data_dir: Path) -> tuple[str, bool]:
    """(password, created now): kept in a 0600 file so a second `try` can log in again."""
    path = data_dir / PASSWORD_FILE
    if path.exists():
        return path.read_text().strip(), False
    data_dir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password)
    return password, True


def _pick_port(host: str, wanted: int | None) -> int:
    if wanted == 0:
        return serve.free_port(host)
    if wanted is not None:
        serve.check_port_free(host, wanted)
        return wanted
    try:
        serve.check_port_free(host, DEFAULT_PORT)
        return DEFAULT_PORT
    except EvalkitError:
        return serve.free_port(host)


def _judge_from_env() -> tuple[str, str, str] | None:
    base_url, model, key = (os.environ.get(name, "").strip() for name in JUDGE_ENV)
    if not base_url and not model:
        return None
    if not (base_url and model):
        raise EvalkitError(
            f"to grade the demo with an LLM judge set both {JUDGE_ENV[0]} (an OpenAI-compatible "
            f"base URL) and {JUDGE_ENV[1]} (a model name), and {JUDGE_ENV[2]} if it needs a key"
        )
    return base_url, model, key


def _write_project(data_dir: Path, judge: tuple[str, str, str] | None) -> Path:
    """A developer's repo for the demo: evalkit.yaml (naming, for the SDK's judge, the
    variable that holds the judge's key: the key itself is never written) and cases/."""
    project = data_dir / "repo"
    project.mkdir(parents=True, exist_ok=True)
    lines = ["cases_dir: cases"]
    if judge is not None and judge[2]:
        lines += [
            "credentials:",
            "  llm_providers:",
            f"    {judge[0]}: {{api_key_env: {JUDGE_ENV[2]}}}",
        ]
    (project / "evalkit.yaml").write_text("\n".join(lines) + "\n")
    return project


@contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _write_suite(target: Path, judged: bool) -> Path:
    """The packaged sample suite copied under the data dir (a judge rubric added when a
    judge is configured), as a developer's repo would hold it."""
    suite = target / DATASET
    shutil.rmtree(suite, ignore_errors=True)
    suite.mkdir(parents=True)
    source = resources.files("evalkit.demo").joinpath("cases").joinpath(DATASET)
    for item in source.iterdir():
        if not item.name.endswith(".yaml"):
            continue
        text = item.read_text()
        if judged:
            text += f"  judge:\n    rubric: {JUDGE_RUBRIC}\n"
        (suite / item.name).write_text(text)
    return suite


class Api:
    """The demo's calls to its own server, as the admin."""

    def __init__(self, base_url: str, password: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60)
        r = self.http.post("/api/auth/login", json={"username": "admin", "password": password})
        if r.status_code != 200:
            raise EvalkitError(
                f"cannot log in as admin with the password in {PASSWORD_FILE} ({r.text}); this "
                "data dir was used by another server: pass --data-dir with a new directory"
            )
        self.token = r.json()["token"]
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def call(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201), **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code not in ok:
            raise EvalkitError(f"{method} {path} answered {r.status_code}: {r.text}")
        return r.json() if r.content else None

    def ensure(self, path: str, create: str, body: dict[str, Any]) -> None:
        """Create the thing unless it exists (a second `evalkit try` reuses the first's)."""
        if self.http.get(path).status_code == 404:
            self.call("POST", create, json=body)


def _wait_finished(api: Api, experiment_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        detail = api.call("GET", f"/api/experiments/{experiment_id}")
        if detail["status"] == "finished":
            return detail
        if time.monotonic() > deadline:
            raise EvalkitError(
                f"experiment {experiment_id} did not finish within {timeout:.0f} s: "
                f"{detail['by_state']}"
            )
        time.sleep(0.2)


@contextmanager
def _reference_harness() -> Iterator[str]:
    from evalkit.harness.reference import Behaviour, ReferenceHarness

    harness = ReferenceHarness(Behaviour(run_seconds=0.2)).start()
    try:
        yield harness.url
    finally:
        harness.stop()


def _run_harness_agent(api: Api, harness_url: str, say: Callable[[str], None]) -> int:
    agents = f"/api/workspaces/{WORKSPACE}/agents"
    if api.http.get(f"{agents}/{HARNESS_AGENT}").status_code == 404:
        api.call("POST", agents, json={"name": HARNESS_AGENT, "harness_url": harness_url})
    else:  # the harness listens on a new port each time: point the agent at this one
        api.call("PATCH", f"{agents}/{HARNESS_AGENT}", json={"harness_url": harness_url})
    say(f"agent {HARNESS_AGENT}@{WORKSPACE}: the reference harness at {harness_url}")
    body = {"dataset": f"{DATASET}@{WORKSPACE}", "agent": f"{HARNESS_AGENT}@{WORKSPACE}"}
    created = api.call("POST", "/api/experiments", json=body)
    say(f"experiment {created['id']}: {created['runs']} runs of {HARNESS_AGENT}, server-driven")
    return int(created["id"])


def _run_traced_agent(api: Api, base_url: str, say: Callable[[str], None]) -> int:
    from evalkit.demo.traced_agent import answer
    from evalkit.otel.mapping import load_starter
    from evalkit.sdk import run_experiment, tracing

    agents = f"/api/workspaces/{WORKSPACE}/agents"
    body = {
        "name": TRACED_AGENT,
        "trajectory_source": "otel",
        "mapping": load_starter("openinference"),
        "trajectory_wait": 30,
    }
    api.ensure(f"{agents}/{TRACED_AGENT}", agents, body)
    say(f"agent {TRACED_AGENT}@{WORKSPACE}: code-driven, trajectories from its OpenTelemetry spans")
    ref = f"{TRACED_AGENT}@{WORKSPACE}"
    tracing.register(agent=ref, server_url=base_url, token=api.token)
    try:
        with _as_cli(base_url, api.token):
            result = run_experiment(
                dataset=f"{DATASET}@{WORKSPACE}",
                agent=ref,
                task=answer,
                concurrency=2,
                server_url=base_url,
                progress=False,
                timeout=120,
            )
    finally:
        tracing.unregister()
    say(f"experiment {result.id}: {len(result.runs)} runs of {TRACED_AGENT}, run by the SDK")
    return int(result.id)


def run_demo(
    data_dir: Path,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    say: Callable[[str], None] = print,
    keep_serving: Callable[[DemoResult], None] | None = None,
) -> DemoResult:
    """Run the demo; ``keep_serving`` (if given) is called while everything is still up."""
    judge = _judge_from_env()
    settings = Settings(data_dir=str(data_dir))
    settings.server.host = host
    settings.server.port = _pick_port(host, port)
    # The demo's harness listens on loopback, which the egress policy refuses by default.
    settings.egress.allow_private = True
    settings.otel.settle_seconds = min(settings.otel.settle_seconds, 1.0)
    password, created = _admin_password(data_dir)
    say(f"data in {data_dir}")
    with serve.database_for(settings) as target:
        serve.prepare_schema(target)
        serve.ensure_encryption_key(settings, target)
        server = serve.ThreadedServer(
            settings, target.url, worker=True, env={serve.ADMIN_PASSWORD_ENV: password}
        )
        try:
            result = DemoResult(url=server.url, password=password if created else None)
            say(f"server up at {server.url} (embedded PostgreSQL, edge and worker)")
            _demo_steps(server.url, password, judge, data_dir, result, say)
            if keep_serving is not None:
                keep_serving(result)
        finally:
            server.stop()
    return result


def _demo_steps(
    base_url: str,
    password: str,
    judge: tuple[str, str, str] | None,
    data_dir: Path,
    result: DemoResult,
    say: Callable[[str], None],
) -> None:
    api = Api(base_url, password)
    api.ensure(f"/api/workspaces/{WORKSPACE}", "/api/workspaces", {"name": WORKSPACE})
    if judge is not None:
        _configure_judge(api, *judge)
        result.judged = True
        say(f"LLM judge: {judge[1]} at {judge[0]}")
    project = _write_project(data_dir, judge)
    suite = _write_suite(project / "cases", judged=judge is not None)
    _sync(suite, base_url, api.token, say)
    with _reference_harness() as harness_url:
        ids = {HARNESS_AGENT: _run_harness_agent(api, harness_url, say)}
        with _working_directory(project):  # the SDK reads evalkit.yaml from here
            ids[TRACED_AGENT] = _run_traced_agent(api, base_url, say)
        for agent, experiment_id in ids.items():
            detail = _wait_finished(api, experiment_id, timeout=180)
            scores = api.call("GET", f"/api/experiments/{experiment_id}/scores")
            result.experiments[agent] = {
                "id": experiment_id,
                "url": f"{base_url}/experiments/{experiment_id}",
                "by_state": detail["by_state"],
                "scores": scores,
            }


def _configure_judge(api: Api, base_url: str, model: str, key: str) -> None:
    body: dict[str, Any] = {"name": "try-judge", "base_url": base_url}
    if key:
        body["api_key"] = key
    if any(p["name"] == "try-judge" for p in api.call("GET", "/api/llm-providers")):
        api.call("DELETE", "/api/llm-providers/try-judge")  # the env may name another one now
    api.call("POST", "/api/llm-providers", json=body)
    api.call("PUT", "/api/judge-default", json={"provider": "try-judge", "model": model})


@contextmanager
def _as_cli(base_url: str, token: str) -> Iterator[None]:
    """The CLI and the SDK in this process talk to the demo server as the admin."""
    from evalkit.cli.client import SERVER_URL_ENV, TOKEN_ENV

    saved = {name: os.environ.get(name) for name in (SERVER_URL_ENV, TOKEN_ENV)}
    os.environ[SERVER_URL_ENV], os.environ[TOKEN_ENV] = base_url, token
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _sync(suite: Path, base_url: str, token: str, say: Callable[[str], None]) -> None:
    """The same sync as `evalkit sync`, run in this process against the demo server."""
    from evalkit.cli.sync import sync

    # Its report is progress here: stdout stays for the demo's summary (and --json).
    with _as_cli(base_url, token), redirect_stdout(sys.stderr):
        sync(suite, workspace=WORKSPACE)
    say(f"synced the sample suite {suite} into {DATASET}@{WORKSPACE}")
