"""The wheel carries the collector's C pass where the build has a C compiler, and builds
pure (the Python pass runs) where it has none (hatch_build.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from evalkit.distribution import wheel_name

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="uv builds the wheel")


def build(tmp_path: Path, **env: str) -> tuple[Path, str]:
    out = tmp_path / "dist"
    done = subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "EVALKIT_PURE_WHEEL": "", **env},
    )
    [wheel] = out.glob("*.whl")
    return wheel, done.stderr


def test_the_wheel_carries_the_compiled_pass(tmp_path):
    wheel, _ = build(tmp_path)
    assert wheel.name != wheel_name() and "linux" in wheel.name  # a platform wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("evalkit/otel/_native") and n.endswith(".so")]


def test_without_a_compiler_the_wheel_is_pure_and_says_why(tmp_path):
    wheel, stderr = build(tmp_path, CC="/nonexistent/cc")
    assert wheel.name == wheel_name()
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    assert "could not compile evalkit/otel/_native.c" in stderr
    assert "OTLP ingest then runs its per-span work in Python" in stderr
