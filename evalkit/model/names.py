"""Names of users, workspaces and things in them, and ``name@workspace`` references."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evalkit.errors import BadRequest

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
NAME_RULE = (
    "1 to 63 characters: lower-case letters, digits, '_', '.', '-', starting with a letter or digit"
)


MAX_NUMBER_DIGITS = 18
"""The most digits ``whole_number`` reads: any such number fits a bigint column."""


def whole_number(text: str | None) -> int | None:
    """``text`` as a whole number (an id, a version, a limit), or None when it is not one.

    Only ASCII digits count: ``str.isdigit`` is also true of '²' and other Unicode digits,
    which ``int`` refuses (or reads as other digits), and of runs of digits too long for
    ``int`` to read at all.
    """
    if text and len(text) <= MAX_NUMBER_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None


def check_name(what: str, value: str) -> str:
    if not NAME_RE.match(value):
        raise BadRequest(f"{what} {value!r} is not a valid name: use {NAME_RULE}", code="bad-name")
    return value


@dataclass(frozen=True, slots=True)
class Ref:
    """``name@workspace``; ``workspace`` is None for a bare name (the caller's personal one)."""

    name: str
    workspace: str | None

    def resolve(self, personal_workspace: str) -> Ref:
        return Ref(self.name, self.workspace or personal_workspace)

    def __str__(self) -> str:
        return f"{self.name}@{self.workspace}" if self.workspace else self.name


def parse_ref(text: str, what: str = "reference") -> Ref:
    name, sep, workspace = text.partition("@")
    if sep and not workspace:
        raise BadRequest(f"{what} {text!r} ends with '@': write NAME@WORKSPACE or just NAME")
    return Ref(name, workspace or None)
