"""The labelling queue in Chromium: one queued run at a time, p and f label it through the
API's handler and move on, and the queue shrinks by what was labelled."""

from __future__ import annotations

import re

import pytest

from tests.integration.judge_helpers import JudgeServer
from tests.integration.labels_helpers import SUMS, judged_experiment
from tests.integration.runs_helpers import api, engine_server


@pytest.fixture
def judged(database_url, tmp_path, cli):
    judge = JudgeServer().start()
    engine = engine_server(database_url, tmp_path)
    try:
        yield engine, judged_experiment(engine, cli, tmp_path, judge)
    finally:
        engine.stop()
        judge.stop()


def queue(engine, token: str, experiment: int, **query) -> dict:
    found = api(engine, token, "GET", f"/api/experiments/{experiment}/label-queue", params=query)
    assert found.status_code == 200, found.text
    return found.json()


def test_browser_label_the_queue_with_p_then_f(judged, page, log_in, cli):
    engine, j = judged
    before = queue(engine, j.token, j.experiment)
    assert before["total"] == len(SUMS)
    order = [q["run_id"] for q in before["runs"]]
    assert sorted(order) == sorted(j.runs.values())
    assert order == [q["run_id"] for q in queue(engine, j.token, j.experiment)["runs"]]  # stable
    paged = queue(engine, j.token, j.experiment, offset=1, limit=2)["runs"]
    assert [q["run_id"] for q in paged] == order[1:3]

    log_in(engine.url)
    page.goto(f"{engine.url}/experiments/{j.experiment}")
    page.get_by_role("link", name="Label runs").click()
    page.wait_for_url(re.compile(rf"/experiments/{j.experiment}/label$"))
    assert page.locator("#queue-total").inner_text() == str(len(SUMS))
    first = before["runs"][0]
    assert page.get_by_role("heading", name=re.compile(f"Run {first['run_id']} ")).is_visible()
    assert first["explanation"] in page.locator("#judge-explanation").inner_text()
    assert "agent steps" in page.inner_text("main") and "What is" in page.inner_text("main")
    page.keyboard.press("j")  # next, then back
    page.wait_for_url(re.compile(r"at=1"))
    assert page.get_by_role("heading", name=re.compile(f"Run {order[1]} ")).is_visible()
    page.keyboard.press("k")
    page.wait_for_url(re.compile(r"at=0"))
    page.shot("queue")

    with page.expect_navigation(url=re.compile(r"done=label")):
        page.keyboard.press("p")
    assert page.get_by_role("heading", name=re.compile(f"Run {order[1]} ")).is_visible()
    with page.expect_navigation(url=re.compile(r"done=label")):
        page.keyboard.press("f")
    assert page.get_by_role("heading", name=re.compile(f"Run {order[2]} ")).is_visible()
    assert page.locator("#queue-total").inner_text() == str(len(SUMS) - 2)

    def labels(run: int) -> list[tuple[str, float]]:
        found = api(engine, j.token, "GET", f"/api/runs/{run}/labels").json()
        return [(x["name"], x["value"]) for x in found]

    labelled = {run: labels(run) for run in order[:3]}
    assert labelled == {order[0]: [("judge", 1.0)], order[1]: [("judge", 0.0)], order[2]: []}
    after = queue(engine, j.token, j.experiment)
    assert after["total"] == len(SUMS) - 2
    assert [q["run_id"] for q in after["runs"]] == order[2:]  # the rest keep their order
    shown = cli("experiments", "label-queue", str(j.experiment), "--score", "judge")
    assert shown.code == 0, shown.err
    assert f"{len(SUMS) - 2} judge scores wait" in shown.out and f"run {order[2]} " in shown.out
