"""Case files, evalkit.yaml and offline lint, with real files in tmp_path."""

from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest

import evalkit.cases as cases
from evalkit.cases import (
    DEFAULT_MAX_FIXTURE_BYTES,
    EvaluatorsConfig,
    JudgeConfig,
    LintReport,
    NumericConfig,
    ProjectConfig,
    ProjectError,
    ProjectNotFound,
    SuiteError,
    ToolCallsConfig,
    apply_overlay,
    content_hash,
    format_finding,
    format_report,
    hash_fixture,
    lint_suite,
    load_project,
    load_suite,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "case-files.md"
CASES_SRC = Path(cases.__file__).parent


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A project with evalkit.yaml, two fixtures and an empty suite `finance`."""
    write(
        tmp_path / "evalkit.yaml",
        """
        server_url: https://evalkit.example.com/
        cases_dir: eval/cases
        fixtures:
          report:
            path: eval/fixtures/report.txt
            context: The Q3 report.
          logo: eval/fixtures/logo.png
        credentials:
          llm_providers:
            https://api.openai.com/v1/: {api_key_env: TEST_OPENAI_KEY}
        """,
    )
    write(tmp_path / "eval/fixtures/report.txt", "Revenue: $4.2M\n")
    (tmp_path / "eval/fixtures/logo.png").write_bytes(b"\x89PNG fake")
    (tmp_path / "eval/cases/finance").mkdir(parents=True)
    return tmp_path


def suite_of(repo: Path) -> Path:
    return repo / "eval/cases/finance"


def lint(repo: Path, **kwargs: int) -> LintReport:
    return lint_suite(suite_of(repo), load_project(repo), **kwargs)


def found(report: LintReport) -> list[tuple[str, str, int | None]]:
    return [(f.code, Path(f.file).name, f.line) for f in report.findings]


def only(report: LintReport, code: str) -> tuple[str, int | None]:
    """The single finding with ``code``: (file name, line)."""
    matches = [(Path(f.file).name, f.line) for f in report.findings if f.code == code]
    assert len(matches) == 1, found(report)
    return matches[0]


# --------------------------------------------------------------------------- good suites


def test_good_suite_loads(repo: Path) -> None:
    suite_dir = suite_of(repo)
    write(
        suite_dir / "revenue.yaml",
        """
        id: revenue-q3
        input:
          question: What was Q3 revenue?
          files: [report, report]
        expected: {answer: "$4.2M"}
        tags: [finance]
        split: test
        evaluators:
          exact_match: true
          contains: ["4.2"]
          numeric: {value: 4.2, tolerance: 0.01}
          tool_calls: {required: [search], forbidden: [rm], order: [search, answer]}
          max_steps: 10
          latency: true
          judge: {rubric: States revenue as $4.2M.}
          custom: {citation_check: {required: [a]}}
        """,
    )
    write(suite_dir / "b-simple.yml", "input: {question: hi}\n")
    (suite_dir / "README.md").write_text("not a case")
    (suite_dir / "data").mkdir()
    write(suite_dir / "data/ignored.yaml", "not: [a case")

    report = lint(repo)
    assert report.findings == [] and report.ok and report.exit_code == 0
    assert report.case_ids == ["b-simple", "revenue-q3"]
    assert report.custom_evaluator_names() == {"citation_check"}
    assert report.custom_evaluators["citation_check"][0].line == 16

    suite = load_suite(suite_dir, load_project(repo))
    assert suite.name == "finance"
    assert [c.id for c in suite.cases] == ["b-simple", "revenue-q3"]
    case = suite.case("revenue-q3")
    assert case.source == "revenue.yaml"
    assert case.fixture_keys == ["report"]
    assert case.overlay is None
    assert "id" not in case.content and case.content["split"] == "test"
    assert suite.custom_evaluators == {"citation_check"}

    fixture = suite.fixtures["report"]
    data = b"Revenue: $4.2M\n"
    assert fixture.path == (repo / "eval/fixtures/report.txt").resolve()
    assert fixture.size == len(data) and fixture.context == "The Q3 report."
    assert fixture.sha256 == hashlib.sha256(data).hexdigest()
    assert "logo" not in suite.fixtures  # only fixtures the suite uses


def test_case_file_model_is_typed(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        """
        input: {q: 1}
        evaluators:
          numeric: 3
          judge: {rubric: ok, model: gpt-5}
          tool_calls: {required: [search]}
        """,
    )
    report = lint(repo)
    assert report.ok, found(report)
    from evalkit.cases.lint import analyze

    parsed = analyze(suite_of(repo), load_project(repo)).cases[0]
    evaluators = parsed.case_file and parsed.case_file.evaluators
    assert isinstance(evaluators, EvaluatorsConfig)
    assert evaluators.numeric == 3.0
    assert evaluators.judge == JudgeConfig(rubric="ok", model="gpt-5")
    assert evaluators.tool_calls == ToolCallsConfig(required=["search"])
    assert NumericConfig().tolerance == 0.0


def test_id_defaults_to_file_stem(repo: Path) -> None:
    write(suite_of(repo) / "refund-policy.yaml", "input: {q: refunds}\n")
    suite = load_suite(suite_of(repo), load_project(repo))
    assert [c.id for c in suite.cases] == ["refund-policy"]


def test_content_hash_is_stable_across_order_and_formatting(tmp_path: Path) -> None:
    one = write(
        tmp_path / "one/finance/a.yaml",
        """
        input:
          question: "What?"
          context: {b: 1, a: [1, 2]}
        tags: [x]
        """,
    )
    write(
        tmp_path / "two/finance/a.yml",
        """
        # the same case, written differently
        tags:
          - 'x'
        input: {context: {a: [1,   2], b: 1}, question: 'What?'}
        """,
    )
    write(tmp_path / "three/finance/a.yaml", one.read_text().replace("What?", "What!"))
    hashes = [
        load_suite(tmp_path / name / "finance").cases[0].content_hash
        for name in ("one", "two", "three")
    ]
    assert hashes[0] == hashes[1] != hashes[2]
    assert re.fullmatch(r"[0-9a-f]{64}", hashes[0])
    content = load_suite(tmp_path / "one/finance").cases[0].content
    expected = b'{"input":{"context":{"a":[1,2],"b":1},"question":"What?"},"tags":["x"]}'
    assert hashes[0] == hashlib.sha256(expected).hexdigest() == content_hash(content)


def test_explicit_id_does_not_change_the_hash(tmp_path: Path) -> None:
    write(tmp_path / "a/finance/case.yaml", "input: {q: 1}\n")
    write(tmp_path / "b/finance/other.yaml", "id: case\ninput: {q: 1}\n")
    a, b = (load_suite(tmp_path / x / "finance").cases[0] for x in "ab")
    assert a.id == b.id == "case" and a.content_hash == b.content_hash


def test_dates_stay_strings(tmp_path: Path) -> None:
    write(tmp_path / "finance/a.yaml", "input: {when: 2024-01-01}\n")
    assert load_suite(tmp_path / "finance").cases[0].content["input"]["when"] == "2024-01-01"


def test_overlay_loads_and_applies(tmp_path: Path) -> None:
    write(
        tmp_path / "finance-eu/eu.yaml",
        """
        overlay: refund-policy
        expected: {answer: 14 days}
        evaluators: {not_contains: null, contains: ["14"]}
        """,
    )
    case = load_suite(tmp_path / "finance-eu").cases[0]
    assert case.id == "eu" and case.overlay == "refund-policy"
    base = {
        "input": {"question": "Refund window?"},
        "expected": {"answer": "30 days"},
        "evaluators": {"contains": ["30"], "not_contains": ["14"]},
    }
    assert apply_overlay(base, case.content) == {
        "input": {"question": "Refund window?"},
        "expected": {"answer": "14 days"},
        "evaluators": {"contains": ["14"]},
    }


def test_hash_fixture_streams(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    data = b"0123456789" * 300_000  # 3 MB: more than one chunk
    path.write_bytes(data)
    assert hash_fixture(path) == (hashlib.sha256(data).hexdigest(), len(data))


# --------------------------------------------------------------------------- lint codes


def test_broken_yaml_reports_the_line(repo: Path) -> None:
    write(suite_of(repo) / "bad.yaml", "input:\n  question: [a, b\nexpected: {}\n")
    report = lint(repo)
    assert only(report, "E-YAML") == ("bad.yaml", 3)
    assert report.exit_code == 1


def test_two_documents_in_one_file(repo: Path) -> None:
    write(suite_of(repo) / "two.yaml", "input: {q: 1}\n---\ninput: {q: 2}\n")
    assert only(lint(repo), "E-YAML") == ("two.yaml", 2)


def test_recursive_alias(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input:\n  q: &x [1, *x]\n")
    assert only(lint(repo), "E-YAML") == ("a.yaml", 2)


def test_non_string_key(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input:\n  q: 1\n  yes: 2\n")
    assert only(lint(repo), "E-YAML-KEY") == ("a.yaml", 3)


def test_duplicate_key(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\ntags: [a]\ntags: [b]\n")
    assert only(lint(repo), "E-YAML-DUPLICATE-KEY") == ("a.yaml", 3)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("input: {q: 1}\ntags: finance\n", 2),
        ("input: {q: 1}\ntags: [a, 3]\n", 2),
        ("input: [a, b]\n", 1),
        ("input: {q: 1, files: report}\n", 1),
        ("input: {q: 1}\nexpected: 42\n", 2),
        ("input: {q: 1}\nsplit: [a]\n", 2),
        ("input: {q: 1}\nevaluators: [judge]\n", 2),
        ("input: {q: 1}\nid: 12\n", 2),
        ("- just\n- a list\n", 1),
        ("", 1),
    ],
)
def test_wrong_types(repo: Path, text: str, line: int) -> None:
    write(suite_of(repo) / "a.yaml", text)
    assert only(lint(repo), "E-SCHEMA-TYPE") == ("a.yaml", line)


def test_unknown_key(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\n\nexpect: {answer: 1}\n")
    report = lint(repo)
    assert only(report, "E-SCHEMA-UNKNOWN-KEY") == ("a.yaml", 3)
    assert "did you mean `expected`" in report.findings[0].message


def test_missing_input(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "expected: {answer: 1}\n")
    assert only(lint(repo), "E-SCHEMA-REQUIRED") == ("a.yaml", 1)


def test_empty_split(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\nsplit: ''\n")
    assert only(lint(repo), "E-SCHEMA-VALUE") == ("a.yaml", 2)


def test_invalid_case_id(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\nid: 'has space'\n")
    write(suite_of(repo) / "bad name.yaml", "input: {q: 1}\n")
    codes = [c for c in found(lint(repo)) if c[0] == "E-CASE-ID"]
    assert codes == [("E-CASE-ID", "a.yaml", 2), ("E-CASE-ID", "bad name.yaml", 1)]


def test_duplicate_ids(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "id: same\ninput: {q: 1}\n")
    write(suite_of(repo) / "b.yaml", "input: {q: 2}\n\nid: same\n")
    report = lint(repo)
    assert only(report, "E-CASE-ID-DUPLICATE") == ("b.yaml", 3)
    assert "a.yaml:1" in report.findings[0].message


def test_duplicate_id_between_yaml_and_yml(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\n")
    write(suite_of(repo) / "a.yml", "input: {q: 2}\n")
    assert only(lint(repo), "E-CASE-ID-DUPLICATE") == ("a.yml", 1)


def test_unknown_builtin_evaluator(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        "input: {q: 1}\nevaluators:\n  exact_match: x\n  exact_mach: true\n",
    )
    report = lint(repo)
    assert only(report, "E-EVALUATOR-UNKNOWN") == ("a.yaml", 4)
    assert "did you mean `exact_match`" in report.findings[0].message


def test_unknown_custom_evaluator_is_not_an_offline_error(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        "input: {q: 1}\nevaluators:\n  custom:\n    anything_goes: [1, 2]\n    other:\n",
    )
    report = lint(repo)
    assert report.findings == []
    assert report.custom_evaluator_names() == {"anything_goes", "other"}


@pytest.mark.parametrize(
    ("evaluators", "line"),
    [
        ("exact_match: 3", 4),
        ("exact_match: {value: x, fold: true}", 4),
        ("contains: []", 4),
        ("not_contains: {values: [a], ignore_case: maybe}", 4),
        ("regex: '(['", 4),
        ("regex: {ignore_case: true}", 4),
        ("numeric: abc", 4),
        ("numeric:\n    value: 1\n    tolerance: -1", 6),
        ("json_schema: object", 4),
        ("json_schema: {type: text}", 4),
        ("tool_calls: [search]", 4),
        ("tool_calls: {}", 4),
        ("tool_calls: {required: [rm], forbidden: [rm]}", 4),
        ("max_steps: 0", 4),
        ("max_steps: 2.5", 4),
        ("latency: 100", 4),
        ("judge: be nice", 4),
        ("judge:\n    model: gpt-5", 5),
        ("judge: {rubric: '  '}", 4),
        ("custom: [a]", 4),
        ("custom: {'bad name': 1}", 4),
        ("contains: a\n  not_contains: [a]", 5),
    ],
)
def test_evaluator_config_shapes(repo: Path, evaluators: str, line: int) -> None:
    text = f"input: {{q: 1}}\nexpected: {{answer: a}}\nevaluators:\n  {evaluators}\n"
    write(suite_of(repo) / "a.yaml", text)
    assert only(lint(repo), "E-EVALUATOR-CONFIG") == ("a.yaml", line)


def test_reference_needs_expected_answer(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\nevaluators:\n  numeric: true\n")
    write(
        suite_of(repo) / "b.yaml",
        "overlay: target\nevaluators:\n  exact_match: true\n",  # the target may hold it
    )
    assert only(lint(repo), "E-EVALUATOR-CONFIG") == ("a.yaml", 3)


def test_overlay_without_target(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\noverlay:\n")
    report = lint(repo)
    assert only(report, "E-OVERLAY-TARGET") == ("a.yaml", 2)


def test_overlay_on_a_case_of_the_same_suite(repo: Path) -> None:
    write(suite_of(repo) / "base.yaml", "input: {q: 1}\n")
    write(suite_of(repo) / "patch.yaml", "evaluators: {latency: true}\noverlay: base\n")
    report = lint(repo)
    assert only(report, "E-OVERLAY-TARGET") == ("patch.yaml", 2)


def test_overlay_targets_are_reported_for_online_lint(repo: Path) -> None:
    write(suite_of(repo) / "patch.yaml", "overlay: elsewhere\n")
    report = lint(repo)
    assert report.ok
    assert [(Path(x.file).name, x.line) for x in report.overlay_targets["elsewhere"]] == [
        ("patch.yaml", 1)
    ]


def test_unknown_fixture_key(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input:\n  q: 1\n  files:\n    - report\n    - reprot\n")
    report = lint(repo)
    assert only(report, "E-FIXTURE-UNKNOWN") == ("a.yaml", 5)
    assert "did you mean 'report'" in report.findings[0].message


def test_fixture_without_project(tmp_path: Path) -> None:
    write(tmp_path / "finance/a.yaml", "input: {files: [report]}\n")
    report = lint_suite(tmp_path / "finance", None)
    assert only(report, "E-FIXTURE-UNKNOWN") == ("a.yaml", 1)
    assert "no evalkit.yaml" in report.findings[0].message


def test_missing_fixture_file(repo: Path) -> None:
    (repo / "eval/fixtures/report.txt").unlink()
    write(suite_of(repo) / "a.yaml", "input: {files: [report]}\n")
    report = lint(repo)
    assert only(report, "E-FIXTURE-MISSING") == ("evalkit.yaml", 4)


def test_a_missing_fixture_and_one_that_is_not_a_file_are_told_apart(repo: Path) -> None:
    (repo / "eval/fixtures/report.txt").unlink()
    (repo / "eval/fixtures/logo.png").unlink()
    (repo / "eval/fixtures/logo.png").mkdir()
    write(suite_of(repo) / "a.yaml", "input: {files: [report, logo]}\n")
    messages = sorted(f.message for f in lint(repo).findings)
    assert len(messages) == 2, messages
    assert messages[0].startswith("fixture `logo`: eval/fixtures/logo.png is not a regular file")
    assert messages[1].startswith("fixture `report`: file eval/fixtures/report.txt does not exist")
    assert "(used by 1 case(s), first a.yaml:1)" in messages[1]


def test_fixture_that_is_a_directory(repo: Path) -> None:
    (repo / "eval/fixtures/logo.png").unlink()
    (repo / "eval/fixtures/logo.png").mkdir()
    write(suite_of(repo) / "a.yaml", "input: {files: [logo]}\n")
    assert only(lint(repo), "E-FIXTURE-MISSING") == ("evalkit.yaml", 7)


def test_fixture_path_escaping_the_project(repo: Path) -> None:
    project_file = repo / "evalkit.yaml"
    text = project_file.read_text().replace(
        "credentials:", "  secret: ../../etc/passwd\ncredentials:"
    )
    project_file.write_text(text)
    write(suite_of(repo) / "a.yaml", "input: {files: [secret]}\n")
    report = lint(repo)
    assert only(report, "E-PATH-ESCAPE") == ("evalkit.yaml", 8)
    assert "outside the project directory" in report.findings[0].message


def test_fixture_symlink_escaping_the_project(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "data.txt"
    outside.write_text("secret")
    (repo / "eval/fixtures/logo.png").unlink()
    (repo / "eval/fixtures/logo.png").symlink_to(outside)
    write(suite_of(repo) / "a.yaml", "input: {files: [logo]}\n")
    assert only(lint(repo), "E-PATH-ESCAPE") == ("evalkit.yaml", 7)


def test_case_file_symlink_escaping_the_suite(repo: Path) -> None:
    outside = write(repo / "elsewhere.yaml", "input: {q: 1}\n")
    (suite_of(repo) / "linked.yaml").symlink_to(outside)
    assert only(lint(repo), "E-PATH-ESCAPE") == ("linked.yaml", None)


def test_oversize_fixture(repo: Path) -> None:
    with open(repo / "eval/fixtures/logo.png", "wb") as f:
        f.truncate(DEFAULT_MAX_FIXTURE_BYTES + 1)  # sparse: fast, no disk use
    write(suite_of(repo) / "a.yaml", "input: {files: [logo]}\n")
    assert only(lint(repo), "E-FIXTURE-TOO-LARGE") == ("evalkit.yaml", 7)


def test_fixture_cap_is_configurable(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {files: [report]}\n")
    assert only(lint(repo, max_fixture_bytes=4), "E-FIXTURE-TOO-LARGE") == ("evalkit.yaml", 4)
    project_file = repo / "evalkit.yaml"
    project_file.write_text(project_file.read_text() + "max_fixture_bytes: 4\n")
    assert only(lint(repo), "E-FIXTURE-TOO-LARGE") == ("evalkit.yaml", 4)
    assert lint(repo, max_fixture_bytes=1000).ok


def test_duplicate_tag_is_a_warning(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\ntags:\n  - a\n  - a\n")
    report = lint(repo)
    assert only(report, "W-TAG-DUPLICATE") == ("a.yaml", 4)
    assert report.ok and report.exit_code == 0
    assert load_suite(suite_of(repo), load_project(repo)).warnings == report.warnings


def test_empty_suite_is_a_warning(repo: Path) -> None:
    report = lint(repo)
    assert only(report, "W-SUITE-EMPTY") == ("finance", None)


def test_missing_suite_directory(repo: Path) -> None:
    report = lint_suite(repo / "eval/cases/nope", load_project(repo))
    assert only(report, "E-SUITE-NOT-FOUND") == ("nope", None)


def test_invalid_dataset_name(tmp_path: Path) -> None:
    write(tmp_path / "Finance Cases/a.yaml", "input: {q: 1}\n")
    report = lint_suite(tmp_path / "Finance Cases")
    assert only(report, "E-DATASET-NAME") == ("Finance Cases", None)


def test_inline_api_key_is_a_warning(repo: Path) -> None:
    write(
        repo / "evalkit.yaml",
        """
        credentials:
          llm_providers:
            https://llm.example.com: {api_key: sk-test}
        """,
    )
    project = load_project(repo)
    assert project.api_key_for("https://llm.example.com/") == "sk-test"
    report = lint_suite(suite_of(repo), project)
    assert only(report, "W-INLINE-API-KEY") == ("evalkit.yaml", 3)


def test_every_code_is_documented_and_tested() -> None:
    source = "\n".join(p.read_text() for p in CASES_SRC.glob("*.py"))
    codes = set(re.findall(r'"([EW]-[A-Z-]+[A-Z])"', source))
    assert len(codes) >= 20
    docs = DOCS.read_text()
    tests = Path(__file__).read_text()
    for code in codes:
        assert f"| `{code}` |" in docs, f"{code} is missing from the table in {DOCS.name}"
        assert tests.count(f'"{code}"') >= 1, f"{code} has no test"


# --------------------------------------------------------------------------- formatting


def test_format_finding_and_report(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\nmax_steps: 3\n")
    report = lint(repo)
    line = format_finding(report.findings[0], relative_to=repo)
    assert line.startswith(
        "eval/cases/finance/a.yaml:2: E-SCHEMA-UNKNOWN-KEY unknown key `max_steps`"
    )
    assert "\n" not in line
    text = format_report(report, relative_to=repo)
    assert text.splitlines()[-1] == "finance: 1 error, 0 warnings in 1 case file"


def test_load_suite_raises_with_the_findings(repo: Path) -> None:
    write(suite_of(repo) / "a.yaml", "input: {q: 1}\nevaluators: {max_steps: -1}\n")
    write(suite_of(repo) / "b.yaml", "input: {files: [nope]}\n")
    with pytest.raises(SuiteError) as info:
        load_suite(suite_of(repo), load_project(repo))
    assert [f.code for f in info.value.findings] == ["E-EVALUATOR-CONFIG", "E-FIXTURE-UNKNOWN"]
    assert "a.yaml:2: E-EVALUATOR-CONFIG" in str(info.value)
    assert info.value.report.exit_code == 1


# --------------------------------------------------------------------------- evalkit.yaml


def test_load_project_walks_up(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = load_project(suite_of(repo))
    assert isinstance(project, ProjectConfig)
    assert project.path == (repo / "evalkit.yaml").absolute()
    assert project.server_url == "https://evalkit.example.com"
    assert project.cases_dir == repo / "eval/cases"
    assert project.suite_dir("finance") == suite_of(repo)
    assert project.fixtures["report"].context == "The Q3 report."
    assert project.fixtures["logo"].path == "eval/fixtures/logo.png"
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-from-env")
    assert project.api_key_for("https://api.openai.com/v1") == "sk-from-env"
    assert project.api_key_for("https://other.example.com") is None
    monkeypatch.chdir(suite_of(repo))
    assert load_project().path == project.path
    assert load_project(repo / "evalkit.yaml").path == project.path


def test_empty_project_file_is_valid(tmp_path: Path) -> None:
    (tmp_path / "evalkit.yaml").write_text("")
    project = load_project(tmp_path)
    assert project.cases_dir == tmp_path.absolute() / "cases" and project.fixtures == {}


def test_project_unknown_key(repo: Path) -> None:
    write(repo / "evalkit.yaml", "server_url: https://x.example.com\nserver: oops\n")
    with pytest.raises(ProjectError) as info:
        load_project(repo)
    [finding] = info.value.findings
    assert (finding.code, finding.line) == ("E-SCHEMA-UNKNOWN-KEY", 2)
    assert "`server`" in str(info.value) and str(repo / "evalkit.yaml") in str(info.value)


@pytest.mark.parametrize(
    ("text", "code", "line"),
    [
        ("server_url: evalkit.example.com\n", "E-SCHEMA-VALUE", 1),
        ("fixtures:\n  a: {context: no path}\n", "E-SCHEMA-REQUIRED", 2),
        ("fixtures:\n  a: {path: x, kind: pdf}\n", "E-SCHEMA-UNKNOWN-KEY", 2),
        ("fixtures: [a]\n", "E-SCHEMA-TYPE", 1),
        ("credentials:\n  llm_providers:\n    https://x.example.com: {}\n", "E-SCHEMA-VALUE", 3),
        ("credentials:\n  llm:\n    a: b\n", "E-SCHEMA-UNKNOWN-KEY", 2),
        (
            "credentials:\n  llm_providers:\n    x.example.com: {api_key_env: K}\n",
            "E-SCHEMA-VALUE",
            3,
        ),
        ("credentials:\n  llm_providers:\n    https://x.example.com: K\n", "E-SCHEMA-TYPE", 3),
        (
            "credentials:\n  llm_providers:\n    https://x.example.com: {api_key_env: K, key: v}\n",
            "E-SCHEMA-UNKNOWN-KEY",
            3,
        ),
        (
            "credentials:\n  llm_providers:\n    https://x.io: {api_key_env: K, api_key: v}\n",
            "E-SCHEMA-VALUE",
            3,
        ),
        (
            "credentials:\n  llm_providers:\n    https://x.example.com:\n      api_key_env: 1-k\n",
            "E-SCHEMA-VALUE",
            4,
        ),
        (
            "credentials:\n  llm_providers:\n    https://x.example.com:\n      api_key: ''\n",
            "E-SCHEMA-TYPE",
            4,
        ),
        ("max_fixture_bytes: 0\n", "E-SCHEMA-VALUE", 1),
        ("cases_dir: [a]\n", "E-SCHEMA-TYPE", 1),
        ("fixtures:\n  a: x\n  a: y\n", "E-YAML-DUPLICATE-KEY", 3),
        ("server_url: [\n", "E-YAML", 2),
    ],
)
def test_project_errors(repo: Path, text: str, code: str, line: int) -> None:
    write(repo / "evalkit.yaml", text)
    with pytest.raises(ProjectError) as info:
        load_project(repo)
    assert [(f.code, f.line) for f in info.value.findings] == [(code, line)]


def test_project_not_found(tmp_path: Path) -> None:
    with pytest.raises(ProjectNotFound) as info:
        load_project(tmp_path)
    assert info.value.findings[0].code == "E-PROJECT-NOT-FOUND"
    assert "evalkit.yaml" in str(info.value)


# --------------------------------------------------------------------------- docs


def _doc_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)


def test_doc_examples_lint_clean(tmp_path: Path) -> None:
    files = {}
    for block in _doc_blocks():
        first = block.splitlines()[0]
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ")] = block
    assert "evalkit.yaml" in files and len(files) >= 4
    write(tmp_path / "evalkit.yaml", files.pop("evalkit.yaml"))
    project = load_project(tmp_path)
    for entry in project.fixtures.values():
        entry.resolved.parent.mkdir(parents=True, exist_ok=True)
        entry.resolved.write_bytes(b"fixture")
    for name, block in files.items():
        write(project.cases_dir / name.removeprefix("cases/"), block)
    for suite in ("finance", "finance-eu"):
        report = lint_suite(project.suite_dir(suite), project)
        assert report.findings == [], format_report(report)


def test_doc_evaluator_snippets_lint_clean(tmp_path: Path) -> None:
    snippets = [
        doc
        for block in _doc_blocks()
        if block.startswith("evaluators:")
        for doc in block.split("---\n")
    ]
    assert len(snippets) >= 15
    for i, snippet in enumerate(snippets):
        write(tmp_path / "s" / f"case-{i}.yaml", "input: {q: 1}\nexpected: {answer: a}\n" + snippet)
    report = lint_suite(tmp_path / "s")
    assert report.findings == [], format_report(report)


def test_public_names_are_exported() -> None:
    assert set(cases.__all__) == {n for n in dir(cases) if not n.startswith("_")} - {
        "model",
        "project",
        "suite",
        "lint",
    }


def test_library_judges_lint(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        "input: {q: 1}\nexpected: {answer: x}\nevaluators:\n  judges:\n"
        "    answer_correctness: true\n    safety: {model: m}\n",
    )
    assert not [f for f in lint(repo).findings if f.severity == "error"]


def test_unknown_library_judge_names_the_known_ones(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        "input: {q: 1}\nevaluators:\n  judges:\n    safety: true\n    tool_usage: true\n",
    )
    report = lint(repo)
    assert only(report, "E-EVALUATOR-UNKNOWN") == ("a.yaml", 5)
    message = next(f.message for f in report.findings if f.code == "E-EVALUATOR-UNKNOWN")
    assert "`tool_usage`" in message and "tool_use" in message
    assert "task_completion, answer_correctness, groundedness" in message


def test_answer_correctness_needs_expected(repo: Path) -> None:
    write(
        suite_of(repo) / "a.yaml",
        "input: {q: 1}\nevaluators:\n  judges:\n    answer_correctness: true\n",
    )
    report = lint(repo)
    assert only(report, "E-EVALUATOR-CONFIG") == ("a.yaml", 4)
    assert "`expected`" in report.findings[0].message
