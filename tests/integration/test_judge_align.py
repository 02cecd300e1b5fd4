"""`evalkit judge align` through the real CLI, server and worker, with the project's fake
judge in its mode that learns from few-shot examples: it passes every run, people fail two,
and the proposal (those two with the people's verdict) raises agreement in its trial round
while nothing the judge does changes until the proposal is accepted."""

from __future__ import annotations

import pytest

from evalkit.scoring.judge_prompt import PROMPT_HASH
from tests.integration.datasets_helpers import add_user
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer
from tests.integration.labels_helpers import judged_experiment
from tests.integration.runs_helpers import api, engine_server, login_token

PEOPLE = {"s1": 1, "s2": 1, "s3": 0, "s4": 0, "s5": 1}
"""The people's verdicts; the judge passes every run, so s3 and s4 are the disagreements."""


@pytest.fixture
def setup(database_url, tmp_path, cli):
    judge = JudgeServer(JudgeBehaviour(follows_examples=True)).start()
    engine = engine_server(database_url, tmp_path)
    try:
        j = judged_experiment(engine, cli, tmp_path, judge)
        for case, value in PEOPLE.items():
            body = {"name": "judge", "value": value, "comment": f"{case} checked by hand"}
            made = api(engine, j.token, "POST", f"/api/runs/{j.runs[case]}/labels", json=body)
            assert made.status_code == 201, made.text
        yield engine, judge, j
    finally:
        engine.stop()
        judge.stop()


def judge_scores(engine, token: str, run_id: int) -> dict[int, dict]:
    """The run's judge score per round."""
    found = api(engine, token, "GET", f"/api/runs/{run_id}/scores").json()
    return {s["round"]: s for s in found if s["name"] == "judge"}


def agreement(cli, experiment: int) -> dict:
    found = cli("experiments", "agreement", str(experiment), "--json")
    assert found.code == 0, found.err
    (only,) = [a for a in found.json if a["name"] == "judge"]
    return only


def with_examples(judge: JudgeServer, since: int) -> list[bool]:
    return ["<examples>" in judge.user_messages(i)[0] for i in range(since, len(judge.requests))]


def test_align_raises_agreement_and_changes_nothing_until_accepted(setup, cli):
    engine, judge, j = setup
    before = agreement(cli, j.experiment)
    assert before["rate"] == pytest.approx(0.6) and before["kappa"] == pytest.approx(0.0)
    assert {d["case_id"] for d in before["disagreements"]} == {"s3", "s4"}
    asked = len(judge.requests)

    made = cli("judge", "align", "judge", "--experiment", str(j.experiment), "--json")
    assert made.code == 0, made.err
    p = made.json
    assert p["status"] == "ready" and p["score"] == "judge" and p["workspace"] == "dev"
    assert p["base_hash"] == PROMPT_HASH and p["prompt_hash"] != PROMPT_HASH
    assert p["trial_round"] < 0 and p["runs"] == 5
    # The disagreements first, with the people's verdict and comment; then agreements.
    first, second, *rest = p["examples"]
    assert {(first["case_id"], first["verdict"]), (second["case_id"], second["verdict"])} == {
        ("s3", "fail"),
        ("s4", "fail"),
    }
    assert first["why"] == f"{first['case_id']} checked by hand"
    assert {e["case_id"] for e in rest} == {"s1", "s2", "s5"}
    assert p["before"]["rate"] == pytest.approx(0.6)
    assert p["after"]["rate"] == pytest.approx(1.0) and p["after"]["disagreements"] == []
    assert p["after"]["kappa"] == pytest.approx(1.0)
    assert with_examples(judge, asked) == [True] * 5  # the trial showed the examples
    trial = judge_scores(engine, j.token, j.runs["s3"])[p["trial_round"]]
    assert trial["value"] == 0.0 and trial["prompt_hash"] == p["prompt_hash"]

    # Nothing changed: the experiment's agreement and its judge, and a new round grades
    # with the old prompt (no examples, the old hash).
    assert agreement(cli, j.experiment)["rate"] == pytest.approx(0.6)
    shown = api(engine, j.token, "GET", f"/api/experiments/{j.experiment}").json()
    assert shown["judge"]["prompt_hash"] == PROMPT_HASH
    asked = len(judge.requests)
    rescored = cli("evaluate", str(j.experiment), "--evaluator", "judge", "--json")
    assert rescored.code == 0, rescored.err
    assert with_examples(judge, asked) == [False] * 5
    latest = judge_scores(engine, j.token, j.runs["s3"])
    assert latest[max(latest)]["prompt_hash"] == PROMPT_HASH and latest[max(latest)]["value"] == 1
    assert agreement(cli, j.experiment)["rate"] == pytest.approx(0.6)

    # Accepted: the workspace's judge shows the examples, with the proposal's hash.
    text = cli("judge", "align", "judge", "--experiment", str(j.experiment), "--show", str(p["id"]))
    assert "nothing changed yet; accept with" in text.out and "agreement after:  100%" in text.out
    accepted = cli(
        "judge", "align", "judge", "--experiment", str(j.experiment), "--accept", str(p["id"])
    )
    assert accepted.code == 0, accepted.err
    assert "accepted by admin" in accepted.out and p["prompt_hash"] in accepted.out
    asked = len(judge.requests)
    rescored = cli("evaluate", str(j.experiment), "--evaluator", "judge", "--json")
    assert rescored.code == 0, rescored.err
    assert with_examples(judge, asked) == [True] * 5
    latest = judge_scores(engine, j.token, j.runs["s3"])
    assert latest[max(latest)]["prompt_hash"] == p["prompt_hash"]
    after = agreement(cli, j.experiment)
    assert after["rate"] == pytest.approx(1.0) and after["disagreements"] == []

    again = cli(
        "judge", "align", "judge", "--experiment", str(j.experiment), "--accept", str(p["id"])
    )
    assert again.code == 1 and "accepted already" in again.err
    # Now the judge agrees on every labelled run: nothing to align.
    done = cli("judge", "align", "judge", "--experiment", str(j.experiment))
    assert done.code == 1 and "no disagreement to learn from" in done.err


def test_a_second_proposal_made_on_the_old_prompt_goes_stale(setup, cli):
    _, _, j = setup
    first = cli("judge", "align", "judge", "--experiment", str(j.experiment), "--json").json
    second = cli(
        "judge", "align", "judge", "--experiment", str(j.experiment), "--examples", "2", "--json"
    ).json
    assert second["trial_round"] == first["trial_round"] - 1
    assert [e["case_id"] for e in second["examples"]] == [e["case_id"] for e in first["examples"]][
        :2
    ]
    ok = cli(
        "judge", "align", "judge", "--experiment", str(j.experiment), "--accept", str(second["id"])
    )
    assert ok.code == 0, ok.err
    stale = cli(
        "judge", "align", "judge", "--experiment", str(j.experiment), "--accept", str(first["id"])
    )
    assert stale.code == 1 and "changed since judge proposal" in stale.err
    wrong = cli(
        "judge",
        "align",
        "groundedness",
        "--experiment",
        str(j.experiment),
        "--accept",
        str(first["id"]),
    )
    assert wrong.code == 1 and "is for judge of experiment" in wrong.err


def test_who_may_align_and_what_is_refused(setup, cli):
    engine, _, j = setup
    add_user(engine, j.token, "rita", member_of="dev", role="reviewer")
    rita = login_token(engine, "rita", "rita-password")
    path = f"/api/experiments/{j.experiment}/judge-proposals"
    refused = api(engine, rita, "POST", path, json={"score": "judge"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "writers-align-judge"
    for body, code in (
        ({"score": "judge.bogus"}, "not-a-judge"),
        ({"score": "groundedness"}, "no-labels"),
        ({"score": "judge", "max_examples": 0}, "bad-body"),
    ):
        answer = api(engine, j.token, "POST", path, json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == code, answer.text
    made = api(engine, j.token, "POST", path, json={"score": "judge"})
    assert made.status_code == 201, made.text
    proposal = made.json()["id"]
    assert api(engine, rita, "GET", f"/api/judge-proposals/{proposal}").status_code == 200
    refused = api(engine, rita, "POST", f"/api/judge-proposals/{proposal}/accept")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "writers-align-judge"


def test_a_library_judge_is_aligned_under_its_own_hash(database_url, tmp_path, cli):
    from evalkit.scoring.judge_library import LIBRARY

    judge = JudgeServer(JudgeBehaviour(follows_examples=True)).start()
    engine = engine_server(database_url, tmp_path)
    try:
        j = judged_experiment(engine, cli, tmp_path, judge, library=True)
        for case, value in PEOPLE.items():
            label = cli(
                "runs", "label", str(j.runs[case]), "--score", f"judge.answer_correctness={value}"
            )
            assert label.code == 0, label.err
        queue = cli("experiments", "label-queue", str(j.experiment), "--json").json
        assert {q["name"] for q in queue["runs"]} == {"judge"}  # the library score is labelled
        made = cli(
            "judge", "align", "answer_correctness", "--experiment", str(j.experiment), "--json"
        )
        assert made.code == 0, made.err
        p = made.json
        own = LIBRARY["answer_correctness"].prompt_hash
        assert p["score"] == "judge.answer_correctness" and p["base_hash"] == own
        assert p["prompt_hash"] not in (own, PROMPT_HASH)
        assert p["before"]["rate"] == pytest.approx(0.6) and p["after"]["rate"] == pytest.approx(
            1.0
        )
        trial = api(engine, j.token, "GET", f"/api/runs/{j.runs['s4']}/scores").json()
        (tried,) = [s for s in trial if s["round"] == p["trial_round"]]  # not the rubric judge
        assert tried["name"] == "judge.answer_correctness" and tried["value"] == 0.0
        assert tried["prompt_hash"] == p["prompt_hash"]
    finally:
        engine.stop()
        judge.stop()
