"""The product hashes passwords with argon2id at the library's recommended cost.

The tests' in-process servers use argon2id's cheapest parameters (tests/conftest.py), so
this check runs in a process of its own, where nothing has changed them."""

from __future__ import annotations

import re
import subprocess
import sys

from argon2 import PasswordHasher

OWASP_MIN_MEMORY_KIB = 19_456
"""OWASP's floor for argon2id (19 MiB with 2 passes)."""


def product_hash(password: str) -> str:
    code = (
        "import sys; from evalkit.auth import passwords; "
        "print(passwords.hash_password(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, password], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_passwords_are_hashed_with_argon2id_at_the_recommended_cost():
    hashed = product_hash("correct horse battery")
    found = re.fullmatch(r"\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$[^$]+\$[^$]+", hashed)
    assert found, hashed
    memory, passes, lanes = (int(x) for x in found.groups())
    recommended = PasswordHasher()
    assert (memory, passes, lanes) == (
        recommended.memory_cost,
        recommended.time_cost,
        recommended.parallelism,
    )
    assert memory >= OWASP_MIN_MEMORY_KIB and passes >= 2
    assert recommended.verify(hashed, "correct horse battery")
