"""The sync index (evalkit/cases/_index.py) with real files: what it reuses, what it reads
again, and that a suite loaded through it is the suite loaded without it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import msgspec
import pytest

from evalkit.cases import SuiteIndex, load_project, load_suite, sync_target
from evalkit.cases.lint import analyze

CASES = {
    "plain.yaml": "input: {q: hello}\nexpected: {answer: hi}\nevaluators: {exact_match: true}\n",
    "with-file.yaml": "input:\n  q: read it\n  files: [report]\n",
    "named.yml": "id: custom-id\ninput: {q: 1}\ntags: [a, a]\n",  # a warning: W-TAG-DUPLICATE
    "broken.yaml": "input: [unclosed\n",  # an error: E-YAML
    "overlay.yaml": "overlay: base-case\nexpected: {answer: other}\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "evalkit.yaml").write_text("fixtures:\n  report: fixtures/report.txt\n")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "report.txt").write_text("Revenue: $4.2M\n")
    suite = tmp_path / "cases" / "finance"
    suite.mkdir(parents=True)
    for name, text in CASES.items():
        (suite / name).write_text(text)
    return tmp_path


def suite_of(repo: Path) -> Path:
    return repo / "cases" / "finance"


def opened(repo: Path, racy_seconds: float = 0) -> SuiteIndex:
    """The index of the suite; ``racy_seconds=0`` trusts the stat of files written before."""
    return SuiteIndex.open(suite_of(repo), root=repo / "cache", racy_seconds=racy_seconds)


def analysed(repo: Path, index: SuiteIndex | None, directory: Path | str | None = None):
    result = analyze(directory or suite_of(repo), load_project(repo), index=index)
    if index is not None:
        assert index.save() is None
    return result


def same(a, b) -> None:
    """Two analyses found the same: findings, case lists, ids and fixtures."""
    assert a.report == b.report
    strip = [msgspec.structs.replace(c, case_file=None) for c in a.ids]
    assert strip == [msgspec.structs.replace(c, case_file=None) for c in b.ids]
    assert [c.id for c in a.cases] == [c.id for c in b.cases]
    assert a.fixtures == b.fixtures


def counts(index: SuiteIndex) -> tuple[int, int, int]:
    return index.unchanged, index.read, index.parsed


def wait_for_a_new_timestamp(directory: Path, after_ns: int) -> None:
    """Until the filesystem stamps a write later than ``after_ns`` (its clock is coarser than
    a test is fast), so an edit cannot carry the times of the write it replaces."""
    probe = directory / ".probe"
    while True:
        probe.write_bytes(b"x")
        if probe.stat().st_ctime_ns > after_ns:
            probe.unlink()
            return


def test_a_second_pass_reads_no_file_and_finds_the_same(repo: Path) -> None:
    fresh = analysed(repo, None)
    first = opened(repo)
    same(analysed(repo, first), fresh)
    assert counts(first) == (0, 5, 5) and not first.trusted
    second = opened(repo)
    again = analysed(repo, second)
    assert second.trusted and counts(second) == (5, 0, 0)
    same(again, fresh)
    codes = sorted(f.code for f in again.report.findings)
    assert "E-YAML" in codes and "W-TAG-DUPLICATE" in codes


def test_load_suite_through_the_index_is_the_same_suite(repo: Path) -> None:
    (suite_of(repo) / "broken.yaml").unlink()
    (suite_of(repo) / "overlay.yaml").unlink()
    plain = load_suite(suite_of(repo), load_project(repo))
    for _ in range(2):
        index = opened(repo)
        indexed = load_suite(suite_of(repo), load_project(repo), index=index)
        assert index.save() is None
        assert indexed.cases == plain.cases and indexed.fixtures == plain.fixtures
        assert indexed.warnings == plain.warnings
        assert [indexed.version_hash(c) for c in indexed.cases] == [
            plain.version_hash(c) for c in plain.cases
        ]
    assert index.unchanged == 3


def test_a_file_changed_within_the_racy_window_is_read_again(repo: Path) -> None:
    """Files this new are not recognised by their stat (a write in the same filesystem tick
    would keep it): the next pass reads and hashes them, and parses none."""
    analysed(repo, opened(repo, racy_seconds=60))
    second = opened(repo, racy_seconds=60)
    analysed(repo, second)
    assert counts(second) == (0, 5, 0)


def test_a_touched_but_identical_file_is_read_not_parsed(repo: Path) -> None:
    analysed(repo, opened(repo))
    path = suite_of(repo) / "plain.yaml"
    wait_for_a_new_timestamp(suite_of(repo), path.stat().st_ctime_ns)
    os.utime(path)
    index = opened(repo)
    analysed(repo, index)
    assert counts(index) == (4, 1, 0)
    third = opened(repo)
    analysed(repo, third)
    assert counts(third) == (5, 0, 0)


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(repo: Path) -> None:
    """The ctime is part of the stat the index compares, and no tool can set it back."""
    analysed(repo, opened(repo))
    path = suite_of(repo) / "plain.yaml"
    before = path.stat()
    wait_for_a_new_timestamp(suite_of(repo), before.st_ctime_ns)
    edited = CASES["plain.yaml"].replace("hello", "jello")
    assert len(edited) == len(CASES["plain.yaml"])
    path.write_text(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    index = opened(repo)
    result = analysed(repo, index)
    assert counts(index) == (4, 1, 1)
    plain = next(c for c in result.cases if c.id == "plain")
    assert plain.data["input"] == {"q": "jello"}


def test_a_deleted_file_leaves_the_suite_and_the_index(repo: Path) -> None:
    analysed(repo, opened(repo))
    (suite_of(repo) / "named.yml").unlink()
    index = opened(repo)
    result = analysed(repo, index)
    assert "custom-id" not in [c.id for c in result.ids] and counts(index) == (4, 0, 0)
    assert set(opened(repo)._old.files) == set(CASES) - {"named.yml"}  # type: ignore[union-attr]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped byte", "empty"])
def test_a_damaged_index_is_ignored_and_rebuilt(repo: Path, damage: str) -> None:
    fresh = analysed(repo, None)
    analysed(repo, opened(repo))
    file = opened(repo).file
    blob = file.read_bytes()
    damaged = {
        "garbage": b"not an index at all",
        "truncated": blob[: len(blob) // 2],
        "flipped byte": blob[:-10] + bytes([blob[-10] ^ 0x55]) + blob[-9:],
        "empty": b"",
    }[damage]
    file.write_bytes(damaged)
    index = opened(repo)
    assert not index.trusted
    same(analysed(repo, index), fresh)
    assert counts(index) == (0, 5, 5)
    assert opened(repo).trusted


def test_an_index_of_another_suite_or_other_code_is_ignored(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysed(repo, opened(repo))
    other = repo / "cases" / "support"
    other.mkdir()
    (other / "plain.yaml").write_text("input: {q: something else}\n")
    theirs = SuiteIndex.open(other, root=repo / "cache", racy_seconds=0)
    theirs.file.parent.mkdir(parents=True, exist_ok=True)
    theirs.file.write_bytes(opened(repo).file.read_bytes())  # finance's index, under support's name
    foreign = SuiteIndex.open(other, root=repo / "cache", racy_seconds=0)
    assert not foreign.trusted
    support = analyze(other, load_project(repo), index=foreign)
    assert support.cases[0].data == {"input": {"q": "something else"}}

    import evalkit.cases._index as module

    monkeypatch.setattr(module, "fingerprint", lambda: "other checking code")
    assert not opened(repo).trusted


def test_findings_name_files_as_the_directory_was_given(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysed(repo, opened(repo))
    monkeypatch.chdir(suite_of(repo))
    for spelling in (".", str(suite_of(repo)), "../finance"):
        index = opened(repo)
        result = analysed(repo, index, directory=spelling)
        assert index.unchanged == 5
        assert sorted(f.file for f in result.report.findings) == sorted(
            f.file for f in analyze(spelling, load_project(repo)).report.findings
        )
        assert {c.file for c in result.ids} == {
            c.file for c in analyze(spelling, load_project(repo)).ids
        }


def test_a_file_the_index_cannot_hold_exactly_is_parsed_each_time(repo: Path) -> None:
    """NaN is not equal to itself, so the file does not round-trip: no entry, no risk."""
    (suite_of(repo) / "nan.yaml").write_text("input: {x: .nan}\n")
    analysed(repo, opened(repo))
    index = opened(repo)
    analysed(repo, index)
    assert counts(index) == (5, 1, 1)


def test_a_changed_fixture_gets_its_new_sha256(repo: Path) -> None:
    (suite_of(repo) / "broken.yaml").unlink()
    (suite_of(repo) / "overlay.yaml").unlink()
    fixture = repo / "fixtures" / "report.txt"
    index = opened(repo)
    before = load_suite(suite_of(repo), load_project(repo), index=index)
    index.save()
    wait_for_a_new_timestamp(repo / "fixtures", fixture.stat().st_ctime_ns)
    fixture.write_text("Revenue: $9.9M\n")  # the same size
    after = load_suite(suite_of(repo), load_project(repo), index=opened(repo))
    plain = load_suite(suite_of(repo), load_project(repo))
    assert after.fixtures["report"].sha256 == plain.fixtures["report"].sha256
    assert after.fixtures["report"].sha256 != before.fixtures["report"].sha256
    case = after.case("with-file")
    assert after.version_hash(case) != before.version_hash(before.case("with-file"))


def test_synced_hashes_are_kept_per_server_workspace_and_dataset(repo: Path) -> None:
    index = opened(repo)
    one = sync_target("http://a.example/", "dev", "finance")
    two = sync_target("http://a.example", "prod", "finance")
    index.remember(one, {"plain": "1" * 64})
    assert index.save() is None
    again = opened(repo)
    assert again.synced(one) == {"plain": "1" * 64} and again.synced(two) == {}
    again.forget(one)
    again.save()
    assert opened(repo).synced(one) == {}


def test_an_unwritable_cache_is_reported_not_fatal(repo: Path) -> None:
    (repo / "cache").write_text("a file where the cache directory should be")
    index = opened(repo)
    analysed_without_save = analyze(suite_of(repo), load_project(repo), index=index)
    assert analysed_without_save.report.files_checked == 5
    problem = index.save()
    assert problem is not None and "cache" in problem


def test_text_mode_newlines_are_kept(repo: Path) -> None:
    """Files are read as bytes for the hash; lines end as reading them as text did."""
    path = suite_of(repo) / "crlf.yaml"
    path.write_bytes(textwrap.dedent("input:\r\n  q: |\r\n    one\r\n    two\r\n").encode())
    result = analyze(suite_of(repo), load_project(repo))
    crlf = next(c for c in result.cases if c.id == "crlf")
    assert crlf.data["input"]["q"] == "one\ntwo\n"


def test_a_request_without_cases_by_hash_is_what_older_servers_take() -> None:
    """Fields at their default are left out, so a server from before ``known`` (its
    requests refuse unknown fields) takes every sync that sends no case by hash."""
    from evalkit.model import datasets as wire

    plain = wire.SyncRequest(cases=[wire.SyncCase(id="a", content={"input": {}})])
    assert msgspec.json.decode(msgspec.json.encode(plain)) == {
        "cases": [{"id": "a", "content": {"input": {}}, "source": None, "fixtures": {}}]
    }
    by_hash = wire.SyncRequest(cases=[], known=[wire.KnownCase(id="a", version_hash="0" * 64)])
    assert msgspec.json.decode(msgspec.json.encode(by_hash))["known"] == [
        {"id": "a", "version_hash": "0" * 64}
    ]


def test_indexes_not_written_for_a_month_go_when_another_is_written(repo: Path) -> None:
    index = opened(repo)
    analysed(repo, index)
    old = index.file.parent / ("0" * 32 + ".index")
    recent = index.file.parent / ("1" * 32 + ".index")
    for path in (old, recent):
        path.write_bytes(b"an index of a suite that is gone")
    month_ago = os.stat(old).st_mtime - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    (suite_of(repo) / "plain.yaml").write_text("input: {q: changed}\n")
    changed = opened(repo)
    analysed(repo, changed)
    assert not old.exists() and recent.exists() and changed.file.exists()


def test_checks_across_files_run_on_every_pass(repo: Path) -> None:
    """A case file the index vouches for is still checked against evalkit.yaml and the
    other files: a fixture key gone from the registry, a duplicate id in a new file."""
    analysed(repo, opened(repo))
    (repo / "evalkit.yaml").write_text("fixtures: {}\n")
    (suite_of(repo) / "again.yaml").write_text("id: custom-id\ninput: {q: 2}\n")
    index = opened(repo)
    result = analysed(repo, index)
    assert index.unchanged == 5
    codes = {(f.code, Path(f.file).name) for f in result.report.findings}
    assert ("E-FIXTURE-UNKNOWN", "with-file.yaml") in codes
    assert ("E-CASE-ID-DUPLICATE", "named.yml") in codes  # again.yaml sorts first
    same(result, analysed(repo, None))
