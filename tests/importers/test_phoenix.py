"""`evalkit import phoenix` against a real Arize Phoenix (tests/importers/phoenix.py): the
datasets are made by Phoenix's own client, with splits and a second version, and the suite
the import writes passes lint and syncs into a real evalkit server.

Budget: one Phoenix per module (started once, 10 to 60 s by the machine's load; its two
venvs are built once and cached), then a few seconds a test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.importers.phoenix import PhoenixServer, seed, start_phoenix
from tests.integration.datasets_helpers import login

KEY_ENV = "TEST_PHOENIX_KEY"

SUPPORT_V1 = [
    {
        "id": "refund-window",
        "input": {"question": "What is the refund window?"},
        "output": {"answer": "30 days"},
        "metadata": {"tags": ["billing"], "region": "eu"},
        "splits": "train",
    },
    {
        "id": "capital-fr",
        "input": {"question": "Capital of France?"},
        "output": {"answer": "Paris"},
        "metadata": {},
        "splits": ["test", "hard"],
    },
    {
        "id": "attachments",
        "input": {"question": "Summarise the report", "files": ["report.pdf"]},
        "output": {},
        "metadata": {"note": "two\nlines"},
    },
]
SUPPORT_V2 = [
    {**SUPPORT_V1[0], "output": {"answer": "14 days"}},  # changed
    SUPPORT_V1[1],  # the same
    {  # new; "attachments" is left out, so Phoenix deletes it in this version
        "id": "new-one",
        "input": {"question": "Is this new?"},
        "output": {"answer": "yes"},
        "metadata": {},
        "splits": "test",
    },
]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory):
    server = start_phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        seed(
            server,
            [
                {"name": "support", "description": "support answers", "examples": SUPPORT_V1},
                {"name": "support", "examples": SUPPORT_V2},
                {
                    "name": "qa",
                    "examples": [
                        {"input": {"q": "2+2?"}, "output": {"a": "4"}, "metadata": {}},
                        {"input": {"q": "3+3?"}, "output": {"a": "6"}, "metadata": {}},
                    ],
                },
            ],
        )
        yield server
    finally:
        server.stop()


def _import(cli, phoenix: PhoenixServer, into: Path, *extra: str):
    return cli(
        "import", "phoenix", "--url", phoenix.url, "--api-key-env", KEY_ENV,
        "--dataset", "support", "--into", str(into), *extra,
    )  # fmt: skip


def _case_files(suite: Path) -> list[str]:
    return sorted(p.name for p in suite.glob("*.yaml") if not p.name.startswith("."))


def _case(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_versions_and_splits_land_in_case_files_and_a_second_import_updates_them(
    cli, server, phoenix, tmp_path, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, phoenix.api_key)
    suite = tmp_path / "repo" / "cases" / "support"
    v1, v2 = phoenix.versions("support")

    first = _import(cli, phoenix, suite, "--version", v1, "--json")
    assert first.code == 0, first.err
    out = first.json
    assert out["version"] == v1 and out["examples"] == 3
    assert out["added"] == ["support-attachments", "support-capital-fr", "support-refund-window"]
    linted = cli("lint", str(suite), "--offline")
    assert linted.code == 0 and "support: 3 case files, no problems" in linted.out, linted.out
    refund = _case(suite / "support-refund-window.yaml")
    assert refund["input"] == {"question": "What is the refund window?"}
    assert refund["expected"] == {"answer": "30 days"}
    assert refund["tags"] == ["billing"] and refund["split"] == "train"
    origin = refund["metadata"]["imported_from"]
    assert refund["metadata"]["region"] == "eu"
    assert (origin["peer"], origin["dataset"], origin["id"]) == (
        "phoenix",
        "support",
        "refund-window",
    )
    assert set(origin["unmapped"]) == {"node_id", "updated_at"}
    capital = _case(suite / "support-capital-fr.yaml")
    splits = capital["metadata"]["imported_from"]["unmapped"]["splits"]
    assert sorted(splits) == ["hard", "test"] and capital["split"] == splits[0]
    attachments = _case(suite / "support-attachments.yaml")
    assert "expected" not in attachments and "files" not in attachments["input"]
    assert attachments["metadata"]["imported_from"]["unmapped"]["input.files"] == ["report.pdf"]
    assert attachments["metadata"]["note"] == "two\nlines"
    assert out["unmapped"]["splits"] == 1 and out["unmapped"]["input.files"] == 1

    # A reviewer adds an evaluator by hand; the next import keeps it.
    hand = suite / "support-refund-window.yaml"
    hand.write_text(hand.read_text() + "evaluators:\n  contains: [days]\n")

    second = _import(cli, phoenix, suite, "--json")
    assert second.code == 0, second.err
    out = second.json
    assert out["version"] == v2
    assert out["added"] == ["support-new-one"]
    assert out["updated"] == ["support-refund-window"]
    assert out["unchanged"] == ["support-capital-fr"]
    assert out["missing"] == [str(suite / "support-attachments.yaml")]
    refund = _case(hand)
    assert refund["expected"] == {"answer": "14 days"}
    assert refund["evaluators"] == {"contains": ["days"]}
    assert _case_files(suite) == [
        "support-attachments.yaml",
        "support-capital-fr.yaml",
        "support-new-one.yaml",
        "support-refund-window.yaml",
    ]

    again = _import(cli, phoenix, suite, "--prune")
    assert again.code == 0, again.err
    assert "0 added, 0 updated, 3 unchanged" in again.out
    assert "(deleted)" in again.out and not (suite / "support-attachments.yaml").exists()
    assert (suite / ".evalkit-import.yaml").is_file()

    assert cli("lint", str(suite), "--offline").code == 0
    login(cli, server)
    synced = cli("sync", str(suite), "--json")
    assert synced.code == 0, synced.err
    assert synced.json["added"] == [
        "support-capital-fr",
        "support-new-one",
        "support-refund-window",
    ]
    shown = cli("cases", "show", "support-capital-fr@admin", "--json")
    assert shown.code == 0, shown.err
    assert shown.json["content"]["split"] in ("test", "hard")


def test_dry_run_writes_nothing_and_shows_each_file(cli, phoenix, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, phoenix.api_key)
    suite = tmp_path / "cases" / "support"
    result = _import(cli, phoenix, suite, "--dry-run")
    assert result.code == 0, result.err
    assert not suite.exists()
    assert re.search(r"^add\s+.*support-new-one\.yaml\s+\(phoenix id new-one\)$", result.out, re.M)
    assert "3 would be added" in result.out and "dry run: nothing written" in result.out


def test_global_example_ids_become_short_file_names(cli, phoenix, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, phoenix.api_key)
    suite = tmp_path / "cases" / "qa"
    result = cli(
        "import", "phoenix", "--url", phoenix.url, "--api-key-env", KEY_ENV,
        "--dataset", "qa", "--into", str(suite), "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    names = _case_files(suite)
    assert len(names) == 2 and all(re.fullmatch(r"qa-\d+\.yaml", n) for n in names), names
    # The file name comes from the global id "DatasetExample:N"; the id itself is kept.
    ids = [_case(suite / n)["metadata"]["imported_from"]["id"] for n in names]
    assert all(i.startswith("RGF0YXNldEV4YW1wbGU6") for i in ids)


def test_phoenix_refusals_are_named(cli, phoenix, tmp_path, monkeypatch):
    suite = tmp_path / "cases" / "support"
    no_key = cli(
        "import", "phoenix", "--url", phoenix.url, "--dataset", "support", "--into", str(suite)
    )
    assert no_key.code == 1
    assert "answered 401 Unauthorized" in no_key.err and "Invalid token" in no_key.err
    assert "--api-key-env" in no_key.err

    monkeypatch.setenv(KEY_ENV, "not-the-key")
    wrong = _import(cli, phoenix, suite)
    assert wrong.code == 1 and "401" in wrong.err and "--api-key-env" in wrong.err

    monkeypatch.setenv(KEY_ENV, phoenix.api_key)
    version = _import(cli, phoenix, suite, "--version", "RGF0YXNldFZlcnNpb246OTk5")
    assert version.code == 1
    assert "has no version 'RGF0YXNldFZlcnNpb246OTk5'" in version.err
    assert "answered 404" in version.err and phoenix.versions("support")[1] in version.err

    missing = cli(
        "import", "phoenix", "--url", phoenix.url, "--api-key-env", KEY_ENV,
        "--dataset", "nope", "--into", str(suite),
    )  # fmt: skip
    assert missing.code == 1 and "no dataset named 'nope'" in missing.err
    assert "qa" in missing.err and "support" in missing.err
    assert not suite.exists()

    monkeypatch.delenv(KEY_ENV)
    unset = _import(cli, phoenix, suite)
    assert unset.code == 1 and f"{KEY_ENV} is not set" in unset.err
