"""Compiles evalkit/otel/_native.c, the OTLP collector's per-span work, into the wheel.

The extension is optional: evalkit runs the same work in Python without it. So a machine
with no C compiler still builds and installs evalkit (the wheel is then pure, as it is
when EVALKIT_PURE_WHEEL=1 asks for one: the CLI wheel a server hands out).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "evalkit/otel/_native.c"


def compile_command(source: Path, target: Path) -> list[str]:
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-I", sysconfig.get_paths()["include"]]
    if sys.platform == "darwin":
        flags += ["-undefined", "dynamic_lookup"]
    return [*compiler, *flags, str(source), "-o", str(target)]


class NativeBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("EVALKIT_PURE_WHEEL"):
            return
        source = Path(self.root) / SOURCE
        name = "_native" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        if version == "editable":  # the checkout itself is on sys.path
            target = source.parent / name
            target.unlink(missing_ok=True)  # never an older build's, should this one fail
        else:
            target = Path(tempfile.mkdtemp(prefix="evalkit-native-")) / name
        command = compile_command(source, target)
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            output = getattr(exc, "stderr", "") or str(exc)
            self.app.display_warning(
                f"evalkit: could not compile {SOURCE} ({shlex.join(command)}): {output.strip()}\n"
                "evalkit works without it (OTLP ingest then runs its per-span work in Python); "
                "for the compiled pass, install a C compiler and Python's headers (Debian: "
                "apt-get install gcc python3-dev) and build again (uv sync)"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(target)] = f"evalkit/otel/{name}"
