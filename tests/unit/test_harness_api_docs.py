"""docs/harness-api.md against the code: every endpoint, status value and capability flag
the client knows is documented, the three rules are there, and every `extra` key evalkit's
trajectory code reads is in the conventions table."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from evalkit.contracts import HARNESS_OPERATIONS
from evalkit.model.harness import ACCEPTS, FINAL_STATUSES, PROVIDES, RunStatusValue

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "harness-api.md").read_text()


def section(title: str) -> str:
    """The text under ``## title`` up to the next heading of the same level."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert match, f"docs/harness-api.md has no '## {title}' section"
    return match.group(1)


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell (without backticks) -> the other cells, for every table row in ``text``."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_endpoint_is_in_the_table_and_has_its_section():
    endpoints = table_rows(section("Endpoints"))
    for op in HARNESS_OPERATIONS:
        assert f"{op.method} {op.path}" in endpoints, f"{op.method} {op.path} not documented"
    documented = {k for k in endpoints if k.split(" ")[0] in ("GET", "POST")}
    assert documented == {f"{op.method} {op.path}" for op in HARNESS_OPERATIONS}
    for heading in ("GET /capabilities", "POST /runs", "GET /runs/{id}", "POST /runs/{id}/stop",
                    "GET /runs/{id}/trajectory", "GET /runs"):  # fmt: skip
        assert f"### {heading}\n" in DOC, heading


def test_every_status_value_is_documented_with_whether_it_is_final():
    statuses = table_rows(section("Endpoints"))
    values = typing.get_args(RunStatusValue)
    assert set(values) == {"queued", "running", "succeeded", "failed", "stopped"}
    for value in values:
        assert value in statuses, f"status {value} not in the table"
        final = statuses[value][0]
        assert final == ("yes" if value in FINAL_STATUSES else "no"), (value, final)


def test_every_capability_flag_is_explained():
    flags = table_rows(section("Endpoints"))
    for name in ACCEPTS:
        assert f"accepts.{name}" in flags, name
    for name in PROVIDES:
        assert f"provides.{name}" in flags, name


def test_the_rules():
    rules = section("Rules")
    for rule in (
        "**Declare only what works.**",
        "**Implement stop.**",
        "**After a stop, report a final status once the trajectory is complete.**",
        "**Start each run once per `evalkit_run_id`**",
        "**Keep statuses final.**",
    ):
        assert rule in rules, rule
    assert "`evalkit harness check`" in rules and "stop_grace" in rules.replace("-", "_")


def test_the_contract_files_and_commands_are_named():
    files = table_rows(section("The contract files"))
    assert {"harness-api-v1.json", "atif-accepted.json", "custom-evaluator-api-v1.json"} <= set(
        files
    )
    assert "evalkit contracts export --target DIR" in DOC
    assert "## evalkit harness check" in DOC


EXTRA_READ = re.compile(r"""\[\s*["']extra["']\s*\]\s*\[\s*["'](\w+)["']\s*\]""")
EXTRA_IN = re.compile(r"""["'](\w+)["']\s+in\s+\w+\[\s*["']extra["']\s*\]""")


def test_every_extra_key_evalkit_reads_is_in_the_conventions_table():
    """The trajectory code (validation, summary, scoring) reads `extra` only through the
    keys in the table; a new one read without documenting it fails here."""
    table = table_rows(section("evalkit's ATIF conventions"))
    read: set[str] = set()
    for folder in ("atif", "scoring"):
        for path in (ROOT / "evalkit" / folder).rglob("*.py"):
            text = path.read_text()
            read.update(EXTRA_READ.findall(text))
            read.update(EXTRA_IN.findall(text))
    assert "context_management" in read  # the scan finds the one key known to be read
    documented = {k.split(".extra.")[1] for k in table if ".extra." in k}
    assert read <= documented, f"extra keys read but not documented: {read - documented}"


ATIF_RFC = "https://github.com/laude-institute/harbor/blob/main/docs/rfcs/0001-trajectory-format.md"


def test_the_atif_rfc_is_named_and_pinned_at_the_versions_evalkit_accepts():
    """The trajectory page and the deployment skill's reference name the RFC that defines
    ATIF and the versions evalkit is pinned to; adding a version means updating both."""
    from evalkit.atif.model import SCHEMA_VERSIONS

    pinned = f"`{SCHEMA_VERSIONS[0]}` to `{SCHEMA_VERSIONS[-1]}`"
    reference = ROOT / "evalkit" / "skills" / "evalkit-deployment" / "references" / "harness-api.md"
    for page in (ROOT / "docs" / "atif.md", reference):
        text = " ".join(page.read_text().split())
        assert ATIF_RFC in text and pinned in text, page.name
