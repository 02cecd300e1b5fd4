"""run_experiment refuses options that cannot work before it asks anything of a server."""

from __future__ import annotations

import pytest

from evalkit.sdk import Judge, SdkError, run_experiment


def answer(input):
    return "4"


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number of at least 1, got 0"),
        ({"concurrency": 2.5}, "concurrency must be a whole number of at least 1, got 2.5"),
        ({"repetitions": 0}, "repetitions must be from 1 to 100, got 0"),
        ({"repetitions": 101}, "repetitions must be from 1 to 100, got 101"),
        ({"judge": "gpt-judge"}, "judge takes evalkit.sdk.Judge"),
    ],
)
def test_a_bad_option_is_refused_with_its_value(options, refusal):
    with pytest.raises(SdkError) as refused:
        run_experiment(dataset="finance", agent="mine", task=answer, **options)
    assert refusal in str(refused.value)


@pytest.mark.parametrize(
    "narrowing",
    [
        {"dataset": "finance"},
        {"case_ids": ["add"]},
        {"split": "test"},
        {"model": "gpt-x"},
        {"repetitions": 2},
    ],
)
def test_resume_takes_the_experiment_as_it_was_started(narrowing):
    with pytest.raises(SdkError, match="resume= goes on with the experiment as it was started"):
        run_experiment(resume=7, task=answer, **narrowing)


@pytest.mark.parametrize("given", [{"dataset": "finance"}, {"agent": "mine"}, {}])
def test_a_new_experiment_needs_a_dataset_and_an_agent(given):
    with pytest.raises(SdkError, match=r"give dataset= and agent= \(or resume=EXPERIMENT_ID\)"):
        run_experiment(task=answer, **given)


def test_the_options_are_checked_before_the_server_is_asked(monkeypatch, tmp_path):
    # No stored login and no token: asking the server first would fail on the login.
    monkeypatch.setenv("EVALKIT_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("EVALKIT_CLI_CONFIG_DIR", str(tmp_path / "cli-config"))
    monkeypatch.delenv("EVALKIT_TOKEN", raising=False)
    with pytest.raises(SdkError, match=r"not logged in to http://127\.0\.0\.1:9"):
        run_experiment(dataset="finance", agent="mine", task=answer)
    with pytest.raises(SdkError, match="repetitions must be from 1 to 100, got 0"):
        run_experiment(
            dataset="finance",
            agent="mine",
            task=answer,
            repetitions=0,
            judge=Judge(base_url="http://127.0.0.1:9/v1", model="m"),
        )
