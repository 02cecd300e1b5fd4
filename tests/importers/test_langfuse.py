"""`evalkit import langfuse` against a loopback server that answers as Langfuse's published
public API does for the routes the import reads (tests/importers/langfuse_api.py, which
also says why a real Langfuse cannot run here: it needs ClickHouse, Redis and its Docker
images). The written suite passes lint and syncs into a real evalkit server."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from tests.importers.langfuse_api import PUBLIC_KEY, SECRET_KEY, LangfuseApi
from tests.integration.datasets_helpers import login


@pytest.fixture
def langfuse(monkeypatch):
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    with LangfuseApi() as api:
        yield api


def _import(cli, api: LangfuseApi, dataset: str, into: Path, *extra: str):
    return cli(
        "import", "langfuse", "--url", api.url, "--dataset", dataset, "--into", str(into), *extra
    )


def _case(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _case_files(suite: Path) -> list[str]:
    return sorted(p.name for p in suite.glob("*.yaml") if not p.name.startswith("."))


def test_pages_of_items_become_cases_that_lint_and_sync(cli, server, langfuse, tmp_path):
    langfuse.add_dataset("evals/faq", description="FAQ answers", metadata={"owner": "support"})
    total = 1050
    for n in range(total):
        langfuse.put_item("evals/faq", f"item-{n:04d}", input={"question": f"q{n}"},
                          expected={"answer": f"a{n}"}, metadata={"n": n})  # fmt: skip
    suite = tmp_path / "repo" / "cases" / "faq"

    first = _import(cli, langfuse, "evals/faq", suite, "--json")
    assert first.code == 0, first.err
    out = first.json
    assert out["examples"] == total and len(out["added"]) == total
    pages = [q for path, q in langfuse.requests if path == "/api/public/dataset-items"]
    assert sorted(int(q["page"][0]) for q in pages) == list(range(1, 12))
    assert {q["limit"][0] for q in pages} == {"100"} and {q["datasetName"][0] for q in pages} == {
        "evals/faq"
    }
    assert "read 1,050 of 1,050 examples" in first.err and "wrote 1,050 of 1,050 files" in first.err
    case = _case(suite / "faq-item-0007.yaml")
    assert case["input"] == {"question": "q7"} and case["expected"] == {"answer": "a7"}
    assert case["metadata"]["n"] == 7
    origin = case["metadata"]["imported_from"]
    assert (origin["peer"], origin["dataset"], origin["id"]) == (
        "langfuse",
        "evals/faq",
        "item-0007",
    )
    assert set(origin["unmapped"]) == {"createdAt", "updatedAt"}
    record = yaml.safe_load((suite / ".evalkit-import.yaml").read_text())
    assert record["peer_dataset"]["description"] == "FAQ answers"
    assert record["peer_dataset"]["metadata"] == {"owner": "support"}

    langfuse.put_item("evals/faq", "item-0007", input={"question": "q7"},
                      expected={"answer": "seven"}, metadata={"n": 7})  # fmt: skip
    langfuse.delete_item("evals/faq", "item-0008")
    langfuse.put_item("evals/faq", "item-new", input={"question": "new"})
    second = _import(cli, langfuse, "evals/faq", suite, "--json")
    assert second.code == 0, second.err
    out = second.json
    assert out["added"] == ["faq-item-new"] and out["updated"] == ["faq-item-0007"]
    assert len(out["unchanged"]) == total - 2
    assert out["missing"] == [str(suite / "faq-item-0008.yaml")]
    assert len(_case_files(suite)) == total + 1
    assert _case(suite / "faq-item-0007.yaml")["expected"] == {"answer": "seven"}

    login(cli, server)
    synced = cli("sync", str(suite), "--json")
    assert synced.code == 0, synced.err
    assert len(synced.json["added"]) == total + 1


def test_items_that_are_not_mappings_and_other_fields(cli, langfuse, tmp_path):
    langfuse.add_dataset("mixed")
    langfuse.put_item("mixed", "text", input="What is 2+2?", expected="4",
                      metadata={"tags": "math", "split": "test"})  # fmt: skip
    langfuse.put_item("mixed", "list", input=[1, 2], expected=3, metadata="free text",
                      sourceTraceId="trace-1")  # fmt: skip
    langfuse.put_item("mixed", "none", input=None, expected=None, metadata=None)
    langfuse.put_item(
        "mixed",
        "Ünïcode id / #7",
        input={"image": "@@@langfuseMedia:type=image/png|id=m1|source=bytes@@@"},
        mediaReferences=[
            {
                "field": "input",
                "referenceString": "@@@langfuseMedia:type=image/png|id=m1|source=bytes@@@",
                "jsonPath": "$['image']",
                "media": {"mediaId": "m1", "contentType": "image/png", "contentLength": 9,
                          "url": "http://127.0.0.1:9/signed?x=1", "urlExpiry": "2026-01-01"},
            }
        ],
    )  # fmt: skip
    langfuse.put_item("mixed", "gone", input={"q": "archived"}, status="ARCHIVED")
    suite = tmp_path / "cases" / "mixed"

    result = _import(cli, langfuse, "mixed", suite, "--id-prefix", "")
    assert result.code == 0, result.out + result.err
    assert _case_files(suite) == ["Unicode-id-7.yaml", "list.yaml", "none.yaml", "text.yaml"]
    text = _case(suite / "text.yaml")
    assert text["input"] == {"question": "What is 2+2?"} and text["expected"] == {"answer": "4"}
    assert text["tags"] == ["math"] and text["split"] == "test"
    listed = _case(suite / "list.yaml")
    assert listed["input"] == {"value": [1, 2]} and listed["expected"] == {"answer": 3}
    unmapped = listed["metadata"]["imported_from"]["unmapped"]
    assert unmapped["metadata"] == "free text" and unmapped["sourceTraceId"] == "trace-1"
    assert _case(suite / "none.yaml")["input"] == {}
    media = _case(suite / "Unicode-id-7.yaml")
    assert media["metadata"]["imported_from"]["id"] == "Ünïcode id / #7"
    [ref] = media["metadata"]["imported_from"]["unmapped"]["mediaReferences"]
    assert ref["media"] == {"mediaId": "m1", "contentType": "image/png", "contentLength": 9}
    assert "text input: written as `input.question`" in result.out
    assert "mediaReferences (1)" in result.out
    linted = cli("lint", str(suite), "--offline")
    assert linted.code == 0 and "mixed: 4 case files, no problems" in linted.out, linted.out

    # Nothing changed on the peer: no file is written, the record file included.
    before = {p.name: p.stat().st_mtime_ns for p in suite.iterdir()}
    again = _import(cli, langfuse, "mixed", suite, "--id-prefix", "")
    assert again.code == 0, again.err
    assert "0 added, 0 updated, 4 unchanged" in again.out
    assert {p.name: p.stat().st_mtime_ns for p in suite.iterdir()} == before


def test_a_version_is_the_dataset_as_it_was_then(cli, langfuse, tmp_path):
    langfuse.add_dataset("timeline")
    langfuse.put_item("timeline", "a", input={"q": "a"}, expected={"answer": "old"})
    then = langfuse.put_item("timeline", "b", input={"q": "b"})
    langfuse.put_item("timeline", "a", input={"q": "a"}, expected={"answer": "new"})
    langfuse.put_item("timeline", "c", input={"q": "c"})
    suite = tmp_path / "cases" / "timeline"

    stamp = then.strftime("%Y-%m-%dT%H:%M:%SZ")
    past = _import(cli, langfuse, "timeline", suite, "--version", stamp, "--json")
    assert past.code == 0, past.err
    assert past.json["version"] == then.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert past.json["added"] == ["timeline-a", "timeline-b"]
    assert _case(suite / "timeline-a.yaml")["expected"] == {"answer": "old"}
    sent = [q["version"][0] for p, q in langfuse.requests if p == "/api/public/dataset-items"]
    assert sent == [past.json["version"]]

    bad = _import(cli, langfuse, "timeline", suite, "--version", "last tuesday")
    assert bad.code == 1 and "is not a time" in bad.err and "2026-01-21T14:35:42Z" in bad.err


def test_langfuse_refusals_are_named(cli, langfuse, tmp_path, monkeypatch):
    langfuse.add_dataset("faq")
    suite = tmp_path / "cases" / "faq"

    missing = _import(cli, langfuse, "nope", suite)
    assert missing.code == 1
    assert "has no dataset named 'nope'" in missing.err and "Dataset not found" in missing.err

    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    wrong = _import(cli, langfuse, "faq", suite)
    assert wrong.code == 1 and "answered 401 Unauthorized" in wrong.err
    assert "Invalid credentials" in wrong.err and "--secret-key-env" in wrong.err
    assert "sk-lf-wrong" not in wrong.err

    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    asked = len(langfuse.requests)
    upper = _import(cli, langfuse, "faq", tmp_path / "cases" / "FAQ")
    assert upper.code == 1 and "'FAQ' becomes the dataset's name" in upper.err
    a_file = tmp_path / "faq.txt"
    a_file.write_text("")
    not_dir = _import(cli, langfuse, "faq", a_file)
    assert not_dir.code == 1 and "is a file: give the suite's directory" in not_dir.err
    assert len(langfuse.requests) == asked  # refused before the peer is asked

    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY")
    unset = _import(cli, langfuse, "faq", suite)
    assert unset.code == 1 and "LANGFUSE_PUBLIC_KEY is not set" in unset.err
    assert not suite.exists()

    basic = [
        base64.b64decode(h.removeprefix("Basic ")).decode()
        for h in langfuse.auth_headers
        if h.startswith("Basic ")
    ]
    assert basic and set(basic) == {f"{PUBLIC_KEY}:{SECRET_KEY}", f"{PUBLIC_KEY}:sk-lf-wrong"}


def test_an_older_langfuse_without_the_v2_dataset_route(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    with LangfuseApi(older=True) as api:
        api.add_dataset("faq", description="old")
        api.put_item("faq", "x", input={"q": "x"})
        result = _import(cli, api, "faq", tmp_path / "cases" / "faq", "--json")
        assert result.code == 0, result.err
        paths = [p for p, _ in api.requests]
        missing = _import(cli, api, "nope", tmp_path / "cases" / "faq")
    assert paths[:2] == ["/api/public/v2/datasets/faq", "/api/public/datasets/faq"]
    assert result.json["added"] == ["faq-x"]
    assert missing.code == 1 and "has no dataset named 'nope'" in missing.err


def test_a_rate_limited_page_is_asked_again_after_retry_after(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    with LangfuseApi(limit_after=2) as api:
        api.add_dataset("faq")
        for n in range(350):
            api.put_item("faq", f"i{n:03d}", input={"q": str(n)})
        result = _import(cli, api, "faq", tmp_path / "cases" / "faq", "--json")
        pages = [int(q["page"][0]) for p, q in api.requests if p == "/api/public/dataset-items"]
    assert result.code == 0, result.err
    assert len(result.json["added"]) == 350
    assert "answered 429 Too Many Requests" in result.err and "Rate limit exceeded" in result.err
    assert "trying again in 1 s" in result.err
    assert len(pages) == 5 and sorted(set(pages)) == [1, 2, 3, 4]
