"""Every command, flag, config key, variable and file the installed skills name exists.

The skills are read as `evalkit skills install` writes them. Commands are taken from code
spans and code blocks (`evalkit ...`, `uv run evalkit ...`, after `&&`, `|`, `;`, `(`, `run:`):
each subcommand path must be a command or group of the cyclopts app (the walker of
test_reference_docs.py), and each `--flag` must be accepted by cyclopts' own parser for that
command. Dotted config keys must be keys or sections of ``Settings``; ``EVALKIT_*``
variables must be settings' variables or be read somewhere in evalkit; links and named files
(references/, mappings/, evalkit-docs/, config.example.yaml, and paths of the evalkit
repository such as compose/...) must exist; names imported from evalkit.sdk must exist.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import pytest
from test_reference_docs import commands, settings_rows

ROOT = Path(__file__).parents[2]
SEPARATORS = re.compile(r"&&|\|\||;|[()]|(?<![\w\"'])\|")
COMMAND_START = re.compile(r"^(?:-\s+)?(?:run:\s*)?(?:\$\s+)?(?:uv run\s+)?evalkit\s+(.*)$")
CONFIG_KEY = re.compile(
    r"(?<![\w/.-])((?:database|server|auth|otel|egress|worker)(?:\.[a-z_]+)+)(?![\w/-])"
)
ENV_VAR = re.compile(r"\bEVALKIT_[A-Z_]*[A-Z]\b")
SKILL_FILE = re.compile(
    r"(?<![\w/.-])((?:\.\./)*(?:references|mappings|evalkit-docs)/[\w.-]+\.(?:md|json|yaml)"
    r"|config\.example\.yaml)"
)
REPO_FILE = re.compile(r"(?<![\w/.-])((?:compose|docs|examples|benchmarks|evalkit)/[\w./-]*\w)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SDK_IMPORT = re.compile(r"from evalkit\.sdk import ([\w, ]+)")
SECTION = re.compile(r'"([^"\n`]+)"\s+(?:in|on|of)\s+`([^`\s]+\.md)`')
ALWAYS_FLAGS = {"--help", "-h", "--version"}


# ---------------------------------------------------------------------------- reading


def code_of(text: str, markdown: bool) -> tuple[list[str], list[str]]:
    """(code blocks, inline code spans) of a file; a file that is not markdown is one block."""
    if not markdown:
        return [text], []
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    spans = [" ".join(s.split()) for _, s in re.findall(r"(`+)(.+?)\1", prose, re.S)]
    return blocks, spans


def command_tails(blocks: list[str], spans: list[str]) -> list[str]:
    """What follows `evalkit` on each command line the code names."""
    tails = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            for segment in SEPARATORS.split(line):
                if match := COMMAND_START.match(segment.strip()):
                    tails.append(match[1])
    for span in spans:
        if match := COMMAND_START.match(span):
            tails.append(match[1])
    return tails


def tokens_of(tail: str) -> list[str]:
    try:
        words = shlex.split(tail, comments=True)
    except ValueError:
        words = tail.split()
    return [w.strip("[]") for w in words if w.strip("[]")]


# ---------------------------------------------------------------------------- the CLI


@functools.cache
def command_paths() -> tuple[frozenset[str], frozenset[str]]:
    """(runnable command paths, group paths) of the real CLI."""
    runnable = frozenset(commands())
    groups = frozenset(" ".join(p.split()[:n]) for p in runnable for n in range(1, len(p.split())))
    return runnable, groups


@functools.cache
def flag_accepted(path: tuple[str, ...], flag: str) -> bool:
    """Whether cyclopts' parser knows ``flag`` on the command at ``path``."""
    from cyclopts.exceptions import CycloptsError, UnknownCommandError, UnknownOptionError

    from evalkit.cli.app import app

    if flag in ALWAYS_FLAGS:
        return True
    try:
        unused = app.parse_known_args([*path, flag])[2]
    except (UnknownOptionError, UnknownCommandError):
        return False  # a group without that option reads it as a command
    except CycloptsError:
        return True  # known, but wants a value or a positional argument
    return flag not in unused


def walk(words: list[str]) -> list[str]:
    """Take the subcommand path off the front of ``words`` (``a|b`` names alternatives)."""
    runnable, groups = command_paths()
    path: list[str] = []
    while words and not words[0].startswith("-") and " ".join(path) not in runnable:
        choices = [" ".join([*path, w]) for w in words[0].split("|")]
        if not all(c in runnable or c in groups for c in choices):
            break
        path.append(words.pop(0).split("|")[0])
    return path


def command_problems(tail: str) -> list[str]:
    words = tokens_of(tail)
    path = walk(words)
    shown = " ".join(path)
    if shown not in command_paths()[0] and words and not words[0].startswith("-"):
        return [f"`evalkit {tail}`: no command `evalkit {shown} {words[0]}`"]
    flags = {w.split("=")[0] for w in words if w.startswith("--")}
    return [
        f"`evalkit {tail}`: `evalkit {shown}` has no flag {flag}"
        for flag in sorted(flags)
        if not flag_accepted(tuple(path), flag)
    ]


# ---------------------------------------------------------------------------- the rest


@functools.cache
def config_keys() -> frozenset[str]:
    keys = [row[0] for row in settings_rows()]
    return frozenset(".".join(k.split(".")[:n]) for k in keys for n in range(1, k.count(".") + 2))


@functools.cache
def evalkit_source() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "evalkit").rglob("*.py"))


def config_problems(code: list[str]) -> list[str]:
    named = {m for text in code for m in CONFIG_KEY.findall(text)}
    named = {k for k in named if not k.endswith((".md", ".json", ".yaml", ".py"))}
    return [f"config key `{k}` is not a setting" for k in sorted(named - config_keys())]


def env_problems(text: str) -> list[str]:
    settings = {row[2].strip("`") for row in settings_rows()}
    return [
        f"variable {name} is neither a setting nor read by evalkit"
        for name in sorted(set(ENV_VAR.findall(text)))
        if name not in settings and f'"{name}"' not in evalkit_source()
    ]


def file_problems(text: str, file: Path, skill_dir: Path) -> list[str]:
    problems = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        if not (file.parent / target.split("#")[0]).exists():
            problems.append(f"link {target} leads nowhere")
    for named in SKILL_FILE.findall(text):
        base = file.parent if named.startswith("../") else skill_dir
        if not (base / named).is_file():
            problems.append(f"file {named} is not written beside the skill")
    for named in REPO_FILE.findall(text):
        if not (ROOT / named).exists():
            problems.append(f"{named} is not in the evalkit repository")
    return problems


def section_problems(text: str, file: Path, skill_dir: Path) -> list[str]:
    """A section named in quotes "in `page.md`" is a heading of that page."""
    problems = []
    for name, page in SECTION.findall(" ".join(text.split())):
        path = (file.parent if page.startswith("../") else skill_dir) / page
        if not path.is_file():
            continue  # file_problems names it
        headings = {h.strip() for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}
        if name not in headings:
            problems.append(f'{page} has no section "{name}"')
    return problems


def sdk_problems(code: list[str]) -> list[str]:
    import evalkit.sdk

    names = {n.strip() for text in code for m in SDK_IMPORT.findall(text) for n in m.split(",")}
    return [f"evalkit.sdk has no {n}" for n in sorted(names) if not hasattr(evalkit.sdk, n)]


def problems_in(file: Path, skill_dir: Path) -> list[str]:
    text = file.read_text()
    blocks, spans = code_of(text, markdown=file.suffix == ".md")
    found = [p for tail in command_tails(blocks, spans) for p in command_problems(tail)]
    found += config_problems(blocks + spans)
    found += env_problems(text)
    found += file_problems(text, file, skill_dir)
    found += section_problems(text, file, skill_dir)
    found += sdk_problems(blocks)
    return found


# ---------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evalkit.cli import register
    from evalkit.cli.skills import install, skill_names

    register()
    target = tmp_path_factory.mktemp("skills")
    assert install(target, origin="https://evals.example.com") == 0
    assert skill_names()
    return target


def skill_texts(installed: Path) -> list[tuple[Path, Path]]:
    """(file, its skill's folder) for every text file of every installed skill."""
    from evalkit.cli.skills import skill_names

    return [
        (file, installed / name)
        for name in skill_names()
        for file in sorted((installed / name).rglob("*"))
        if file.suffix in {".md", ".yaml"}
    ]


def test_every_command_flag_key_and_file_the_skills_name_exists(installed):
    found = [
        f"{file.relative_to(installed)}: {problem}"
        for file, skill_dir in skill_texts(installed)
        for problem in problems_in(file, skill_dir)
    ]
    assert not found, "\n".join(found)


def test_the_skills_name_commands_at_all(installed):
    """The checker reads something: a guard against a regex that silently matches nothing."""
    text = (installed / "evalkit-deployment" / "SKILL.md").read_text()
    tails = command_tails(*code_of(text, markdown=True))
    assert len(tails) > 30
    assert any(t.startswith("agents create ") and "--harness-url" in t for t in tails)


def test_config_example_loads_and_sets_only_known_keys(installed):
    from evalkit.config import load_settings

    example = installed / "evalkit-deployment" / "config.example.yaml"
    settings = load_settings(example, env={})  # unknown keys are refused by Settings
    assert settings.server.public_url and settings.egress.allowed_prefixes


def test_the_config_reference_lists_every_key_with_its_default_and_variable(installed):
    text = (installed / "evalkit-deployment" / "references" / "config-and-deploy.md").read_text()
    for key, default, env in settings_rows():
        row = f"| `{key}` | {default} | `{env}` |"
        assert row in text, f"config-and-deploy.md: no row {row!r}"


def test_the_checker_refuses_what_does_not_exist(tmp_path):
    skill = tmp_path / "made-up"
    (skill / "references").mkdir(parents=True)
    (skill / "references" / "real.md").write_text("# Real\n\n## Upgrades\n")
    page = skill / "SKILL.md"
    page.write_text(
        "Run `evalkit run finance@dev --agent bot@dev --frobnicate`.\n\n"
        "```\nevalkit agents create bot --harness-url http://h --api-key-env K --colour red\n"
        "evalkit agents explode bot\n```\n\n"
        "Set `otel.settle_secs` and EVALKIT_NO_SUCH_THING. See `references/real.md`,\n"
        "`references/gone.md` and [the docs](../evalkit-docs/nowhere.md).\n"
        'Read "Upgrades" in `references/real.md`, then "Backups" in\n`references/real.md`.\n\n'
        "```python\nfrom evalkit.sdk import run_experiment, run_everything\n```\n"
    )
    found = "\n".join(problems_in(page, skill))
    assert "`evalkit run` has no flag --frobnicate" in found
    assert "`evalkit agents create` has no flag --colour" in found
    assert "no command `evalkit agents explode" in found
    assert command_problems("--frob") and command_problems("nosuch thing")
    assert "config key `otel.settle_secs`" in found
    assert "EVALKIT_NO_SUCH_THING" in found
    assert "file references/gone.md is not written" in found
    assert "file references/real.md" not in found
    assert "../evalkit-docs/nowhere.md leads nowhere" in found
    assert 'references/real.md has no section "Backups"' in found
    assert '"Upgrades"' not in found
    assert "evalkit.sdk has no run_everything" in found
    assert "has no run_experiment" not in found
    assert "no flag --harness-url" not in found and "no flag --api-key-env" not in found


def test_the_checker_accepts_real_commands_groups_and_alternatives():
    for tail in (
        "run finance@dev --agent bot@dev --case-id q3 --no-wait --json",
        "agents mapping starter auto > mapping.json",
        "cases approve|reject refund@dev",
        "harness check bot@dev [--timeout 60] [--json]",
        "workspaces",
        "--version",
        "agents create --help",
        "agents --help",
    ):
        assert command_problems(tail) == [], tail
