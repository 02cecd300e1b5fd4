"""Docs that must not drift from the code: settings, access rules, commands."""

from __future__ import annotations

from pathlib import Path

from evalkit.auth.access import RULES
from evalkit.config import env_var_names

DOCS = Path(__file__).parents[2] / "docs"
README = Path(__file__).parents[2] / "README.md"


def test_every_setting_is_documented_with_its_env_var():
    text = (DOCS / "config.md").read_text()
    for key, env in env_var_names().items():
        assert f"`{key}`" in text, f"docs/config.md lacks the key {key}"
        assert f"`{env}`" in text, f"docs/config.md lacks {env}"


def test_every_access_rule_is_documented():
    text = (DOCS / "access.md").read_text()
    for rule in RULES:
        assert f"`{rule}`" in text, f"docs/access.md lacks the rule {rule}"


def test_readme_starts_with_the_two_commands():
    head = README.read_text().splitlines()[:6]
    assert any("uv run evalkit" in line for line in head)
    assert any("uv run pytest" in line for line in head)


def test_readme_links_resolve():
    import re

    for link in re.findall(r"\]\((docs/[^)]+)\)", README.read_text()):
        assert (README.parent / link).exists(), f"README links to missing {link}"
