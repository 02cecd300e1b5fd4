"""A real Arize Phoenix server for the import tests, and its own client to seed it.

:func:`start_phoenix` runs ``python -m phoenix.server.main serve`` from the cached venv of
the ``phoenix_server`` part (``arize-phoenix`` pinned in its requirements.txt; built once by
tests/frameworks/venvs.py) on 127.0.0.1 with free ports, a temporary working directory
(its SQLite database lives there) and auth on: the admin secret is the API key. It waits
for ``/healthz``. :func:`seed` uploads datasets with Phoenix's own client
(``phoenix_client/seed.py``, in the light venv of ``arize-phoenix-client``).

Cost: building the two venvs once (about a minute on a warm uv cache, 600 MB), then each
start is Phoenix importing its server, 10 to 60 s on this 2-core machine depending on the
load (import time, not our waiting).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evalkit.serve import free_port
from tests.frameworks.venvs import framework_python, run_agent

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 300.0
SECRET = "phoenix-test-secret-0123456789abcdef"
ADMIN_SECRET = "phoenix-test-admin-0123456789abcdef"
"""Phoenix takes its admin secret as a bearer API key (``PHOENIX_ADMIN_SECRET``)."""


@dataclass
class PhoenixServer:
    url: str
    api_key: str
    process: subprocess.Popen[bytes]
    log: Path
    seeded: list[dict[str, Any]] = field(default_factory=list)
    """What :func:`seed` uploaded, in order: name, dataset_id, version_id, examples."""

    def versions(self, name: str) -> list[str]:
        """The version ids the seeding made of dataset ``name``, oldest first."""
        return [u["version_id"] for u in self.seeded if u["name"] == name]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_phoenix(workdir: Path) -> PhoenixServer:
    python = framework_python("phoenix_server", home=HERE)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))},
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ENABLE_AUTH": "true",
        "PHOENIX_SECRET": SECRET,
        "PHOENIX_ADMIN_SECRET": ADMIN_SECRET,
    }
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(python), "-m", "phoenix.server.main", "serve"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
    server = PhoenixServer(f"http://127.0.0.1:{port}", ADMIN_SECRET, process, log)
    try:
        _wait_healthy(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_healthy(server: PhoenixServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(
                f"phoenix serve exited {server.process.returncode}:\n{_tail(server.log)}"
            )
        try:
            if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"phoenix serve not healthy in {START_TIMEOUT:.0f}s:\n{_tail(server.log)}")


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-40:])


def seed(server: PhoenixServer, uploads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upload datasets through Phoenix's client (see phoenix_client/seed.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "uploads.json"
        spec.write_text(json.dumps(uploads))
        env = {"PHOENIX_URL": server.url, "PHOENIX_API_KEY": server.api_key, "SEED_FILE": str(spec)}
        done = run_agent("phoenix_client", "seed.py", env, home=HERE, timeout=300)
    uploaded: list[dict[str, Any]] = json.loads(done.stdout)
    server.seeded.extend(uploaded)
    return uploaded
