"""The CLI starts on every command a user or CI types: what it imports is paid each time."""

from __future__ import annotations

import subprocess
import sys

from evalkit import __version__
from evalkit.cli import VERSION_MODULE_BUDGET

HEAVY = ("numpy", "scipy", "playwright", "google.cloud.storage")
SERVER = ("psycopg", "argon2", "joserfc", "procrastinate", "starlette", "sqlalchemy", "hypercorn")
"""The server's own libraries: a command that only talks HTTP has no use for them."""


def test_a_cli_command_imports_no_heavy_library():
    """`evalkit sync --help` loads every command module (the app registers them all) and
    must not pull numpy (0.15 s a start) or the like in with them, nor the server's
    libraries (the database driver, password hashing, JOSE); they are imported where they
    are used."""
    probe = (
        "import sys\n"
        "from evalkit.cli import main\n"
        "sys.argv = ['evalkit', 'sync', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY + SERVER!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


def test_version_answers_before_the_command_tree_loads():
    """`evalkit --version` is what install scripts and CI run to check the CLI: it loads
    neither cyclopts nor rich nor a command module. A count of modules is stable where a
    time is not."""
    probe = (
        "import sys\n"
        "from evalkit.cli import main\n"
        "sys.argv = ['evalkit', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(len(sys.modules), 'cyclopts' in sys.modules, 'rich' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    version, counted = done.stdout.strip().splitlines()[-2:]
    assert version == __version__
    modules, cyclopts, rich = counted.split()
    assert int(modules) <= VERSION_MODULE_BUDGET, f"--version loaded {modules} modules"
    assert (cyclopts, rich) == ("False", "False")
