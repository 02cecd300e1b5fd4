"""`evalkit skills install`: the skill folders and the user docs a coding agent reads."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import yaml

from evalkit.cli.skills import skill_files, skill_names
from evalkit.otel.mapping import STARTERS, load_starter

EXPECTED = {
    "authoring-eval-cases",
    "connect-traces",
    "eval-driven-development",
    "evalkit-deployment",
    "evalkit-usage",
}
DOCS = Path(__file__).parents[2] / "docs"


def files_of(name: str) -> list[tuple[str, str]]:
    return skill_files(resources.files("evalkit.skills").joinpath(name))


def frontmatter(text: str) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, "a SKILL.md starts with YAML front matter"
    return yaml.safe_load(match[1])


def test_install_writes_every_skill_the_docs_and_the_mappings(cli, tmp_path):
    target = tmp_path / "repo" / ".claude" / "skills"
    r = cli("skills", "install", str(target), "--origin", "https://evals.example.com", "--json")
    assert r.code == 0, r.err
    assert set(skill_names()) == EXPECTED
    for name in EXPECTED:
        text = (target / name / "SKILL.md").read_text()
        meta = frontmatter(text)
        assert meta["name"] == name
        assert len(meta["description"]) > 40
        assert "{{origin}}" not in text
        # Every link to the docs lands on a page written beside the skills.
        for page in re.findall(r"\.\./evalkit-docs/([\w.-]+\.md)", text):
            assert (target / "evalkit-docs" / page).is_file(), (name, page)
    assert (
        "https://evals.example.com/api/otel/v1/traces"
        in (target / "connect-traces" / "SKILL.md").read_text()
    )
    for starter in STARTERS:
        written = json.loads(
            (target / "connect-traces" / "mappings" / f"{starter}.json").read_text()
        )
        assert written == load_starter(starter)
    assert {p.name for p in (target / "evalkit-docs").iterdir()} == {
        p.name for p in DOCS.glob("*.md")
    }
    skill_files = sum(len(files_of(name)) for name in EXPECTED)
    assert len(r.json["files"]) == skill_files + len(STARTERS) + len(list(DOCS.glob("*.md")))
    for name in EXPECTED:
        for relative, _ in files_of(name):
            assert (target / name / relative).is_file(), (name, relative)
    for written in ("references/config-and-deploy.md", "references/harness-api.md"):
        assert (target / "evalkit-deployment" / written).is_file()
    example = (target / "evalkit-deployment" / "config.example.yaml").read_text()
    assert "{{origin}}" not in example


def test_install_again_replaces_what_it_wrote(cli, tmp_path):
    target = tmp_path / "skills"
    assert cli("skills", "install", str(target)).code == 0
    stale = target / "evalkit-usage" / "old-notes.md"
    stale.write_text("from an older evalkit")
    (target / "mine").mkdir()
    (target / "mine" / "SKILL.md").write_text("the repo's own skill")
    again = cli("skills", "install", str(target))
    assert again.code == 0
    assert not stale.exists()
    assert (target / "mine" / "SKILL.md").read_text() == "the repo's own skill"  # untouched
    assert "{{origin} left as is" not in again.out


def test_install_refuses_a_file_as_the_directory(cli, tmp_path):
    (tmp_path / "f").write_text("x")
    r = cli("skills", "install", str(tmp_path / "f"))
    assert r.code == 1
    assert "is a file" in r.err


# Every command, flag, key and file the skills name: tests/unit/test_skill_references.py.
