"""Human labels on runs through a real server and the real CLI: two people's readings of
the same score are both kept, who may label follows `writers-label`, and bad readings are
refused with what to send instead."""

from __future__ import annotations

import pytest

from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, add_user, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
)

CASE = """\
input:
  question: What is 6 * 7?
expected:
  answer: '40'
evaluators:
  exact_match: true
  latency: true
"""


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def scored_run(engine, cli, tmp_path):
    """A finished, scored run in @dev (exact_match fails: the reference answers 42), the CLI
    logged in as admin; returns (admin token, run id)."""
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "mul", CASE)
    assert cli("sync", str(repo.suite("finance")), "--workspace", "dev").code == 0
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        ran = cli("run", "finance@dev", "--agent", "ref@dev", "--json")
        assert ran.code == 0, ran.err
    (run,) = ran.json["run_list"]
    return token, run["id"]


def test_two_people_label_the_same_run_and_both_are_kept(engine, cli, scored_run):
    token, run_id = scored_run
    add_user(engine, token, "wendy", member_of="dev", role="writer")
    wendy = login_token(engine, "wendy", "wendy-password")

    first = cli("runs", "label", str(run_id), "--score", "exact_match=pass", "--json")
    assert first.code == 0, first.err
    assert first.json["value"] == 1.0 and first.json["labelled_by"] == "admin"

    second = api(
        engine,
        wendy,
        "POST",
        f"/api/runs/{run_id}/labels",
        json={"name": "exact_match", "value": 0, "comment": "40 is the reference"},
    )
    assert second.status_code == 201, second.text
    again = cli("runs", "label", str(run_id), "--score", "exact_match=0.5", "--comment", "unsure")
    assert again.code == 0, again.err
    assert "exact_match labelled 0.5 by admin" in again.out

    labels = api(engine, token, "GET", f"/api/runs/{run_id}/labels").json()
    assert [(x["labelled_by"], x["value"], x["comment"]) for x in labels] == [
        ("admin", 1.0, None),
        ("wendy", 0.0, "40 is the reference"),
        ("admin", 0.5, "unsure"),
    ]
    shown = cli("runs", "show", str(run_id))
    assert shown.code == 0, shown.err
    assert "human labels:" in shown.out
    assert "exact_match: fail by wendy" in shown.out and "(40 is the reference)" in shown.out


def test_only_writers_of_the_experiments_workspace_label(engine, scored_run):
    token, run_id = scored_run
    add_user(engine, token, "rita", member_of="dev", role="reviewer")
    rita = login_token(engine, "rita", "rita-password")
    refused = api(
        engine, rita, "POST", f"/api/runs/{run_id}/labels", json={"name": "exact_match", "value": 1}
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "writers-label"
    assert "members add dev rita --role writer" in refused.json()["error"]["message"]
    # Reading stays open to everyone logged in, and nothing was stored by the refusal.
    read = api(engine, rita, "GET", f"/api/runs/{run_id}/labels")
    assert read.status_code == 200 and read.json() == []


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({"name": "helpfulness", "value": 1}, "no-such-score", "scores: exact_match"),
        ({"name": "latency", "value": 1}, "no-such-score", "no evaluator score named 'latency'"),
        ({"name": "exact_match", "value": 1.5}, "bad-label-value", "between 0 and 1"),
    ],
)
def test_bad_labels_are_refused_and_store_nothing(engine, scored_run, body, code, words):
    token, run_id = scored_run
    refused = api(engine, token, "POST", f"/api/runs/{run_id}/labels", json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == code and words in refused.json()["error"]["message"]
    assert api(engine, token, "GET", f"/api/runs/{run_id}/labels").json() == []


@pytest.mark.parametrize(
    ("score", "words"),
    [
        ("exact_match", "--score takes NAME=VALUE"),
        ("exact_match=maybe", "pass, fail or a number from 0 to 1"),
        ("exact_match=2", "pass, fail or a number from 0 to 1"),
    ],
)
def test_the_cli_refuses_a_malformed_reading_before_asking(cli, score, words):
    result = cli("runs", "label", "1", "--score", score)
    assert result.code == 1
    assert words in result.err


def test_labelling_a_missing_run_says_so(engine, scored_run):
    token, _ = scored_run
    missing = api(
        engine, token, "POST", "/api/runs/999999/labels", json={"name": "exact_match", "value": 1}
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no-such-run"


FIVE = {
    # case: (question, expected); the reference harness answers the sum, so the first two
    # pass exact_match and the last three fail it.
    "c1": ("What is 1 + 1?", "2"),
    "c2": ("What is 2 + 2?", "4"),
    "c3": ("What is 3 + 3?", "7"),
    "c4": ("What is 4 + 4?", "9"),
    "c5": ("What is 5 + 5?", "11"),
}


def test_agreement_kappa_and_confusion_equal_a_hand_count(engine, cli, tmp_path):
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    add_user(engine, token, "wendy", member_of="dev", role="writer")
    wendy = login_token(engine, "wendy", "wendy-password")
    repo = Repo(tmp_path / "repo")
    for case, (question, answer) in FIVE.items():
        repo.case(
            "sums",
            case,
            f"input:\n  question: {question!r}\nexpected:\n  answer: {answer!r}\n"
            "evaluators:\n  exact_match: true\n",
        )
    assert cli("sync", str(repo.suite("sums")), "--workspace", "dev").code == 0
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        ran = cli("run", "sums@dev", "--agent", "ref@dev", "--json")
        assert ran.code == 0, ran.err
    experiment = ran.json["id"]
    runs = {r["case_id"]: r["id"] for r in ran.json["run_list"]}
    scored = {
        case: next(
            s["value"]
            for s in api(engine, token, "GET", f"/api/runs/{run}/scores").json()
            if s["name"] == "exact_match"
        )
        for case, run in runs.items()
    }
    assert scored == {"c1": 1.0, "c2": 1.0, "c3": 0.0, "c4": 0.0, "c5": 0.0}

    def label(who: str, case: str, value: float) -> None:
        body = {"name": "exact_match", "value": value}
        response = api(engine, who, "POST", f"/api/runs/{runs[case]}/labels", json=body)
        assert response.status_code == 201, response.text

    # People: c1 pass, c2 fail, c3 fail, c4 fail, c5 pass. c2 is first labelled pass by the
    # admin, who then changes their mind (their latest label counts). c5 has two labellers
    # who agree; c4 also gets a tie-free second opinion. A sixth-case tie is covered below.
    label(token, "c1", 1)
    label(token, "c2", 1)
    label(token, "c2", 0)
    label(token, "c3", 0)
    label(token, "c4", 0)
    label(wendy, "c4", 0)
    label(token, "c5", 1)
    label(wendy, "c5", 0.8)
    # By hand: evaluator pass & people pass = c1; pass & fail = c2; fail & pass = c5;
    # fail & fail = c3, c4. Agreement 3/5. Evaluator passes 2/5, people pass 2/5:
    # chance = 0.4 * 0.4 + 0.6 * 0.6 = 0.52, kappa = (0.6 - 0.52) / (1 - 0.52) = 1/6.
    result = cli("experiments", "agreement", str(experiment), "--json")
    assert result.code == 0, result.err
    (a,) = result.json
    assert a["name"] == "exact_match" and a["runs"] == 5 and a["agree"] == 3
    assert a["rate"] == pytest.approx(0.6)
    assert a["kappa"] == pytest.approx(1 / 6)
    assert a["confusion"] == {"pass_pass": 1, "pass_fail": 1, "fail_pass": 1, "fail_fail": 2}
    low, high = a["interval"]
    assert low < 0.6 < high  # Wilson 95%: about [0.23, 0.88] for 3 of 5
    assert low == pytest.approx(0.2307, abs=1e-3) and high == pytest.approx(0.8824, abs=1e-3)
    assert [(d["case_id"], d["people_pass"]) for d in a["disagreements"]] == [
        ("c2", False),
        ("c5", True),
    ]
    assert a["split"] == 0

    # A tie between two labellers leaves the run out of the counts.
    label(wendy, "c1", 0)
    (tied,) = cli("experiments", "agreement", str(experiment), "--json").json
    assert tied["runs"] == 4 and tied["split"] == 1
    text = cli("experiments", "agreement", str(experiment))
    assert text.code == 0 and "exact_match: agreement 50%" in text.out
    assert "1 runs left out: their labellers tied" in text.out

    # The agreement gate: 2 of 4 agree (c1 is tied), so >=0.5 passes and >=0.8 fails; a
    # score nobody labelled fails the gate, since nobody checked it.
    def gate(*texts: str):
        flags = [arg for text in texts for arg in ("--gate", text)]
        return cli("experiments", "compare", str(experiment), str(experiment), *flags, "--json")

    passed = gate("exact_match.agreement>=0.5")
    assert passed.code == 0, passed.out + passed.err
    (only,) = passed.json["gates"]
    assert only["passed"] and only["actual"] == pytest.approx(0.5)
    missed = gate("exact_match.agreement>=0.8", "exact_match>=0")
    assert missed.code == 1 and missed.json["passed"] is False
    by_gate = {g["gate"]: g for g in missed.json["gates"]}
    assert by_gate["exact_match>=0"]["passed"]
    assert "(2 of 4 runs)" in by_gate["exact_match.agreement>=0.8"]["message"]
    unchecked = gate("judge.agreement>=0.8")
    assert unchecked.code == 1
    assert "no human label of judge" in unchecked.json["gates"][0]["message"]
    bad = gate("exact_match.agreement>=80")
    assert bad.code != 0 and "0.8, not 80" in (bad.out + bad.err)
