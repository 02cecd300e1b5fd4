"""An experiment graded by the project's fake judge (``judge_helpers.JudgeServer``), for the
labelling queue and judge alignment tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.integration.datasets_helpers import Repo
from tests.integration.judge_helpers import JudgeServer
from tests.integration.runs_helpers import create_agent, harness
from tests.integration.test_remote_evaluators import dev_with_default_judge

SUMS = {
    # case: question; the reference harness answers each sum right, and the rubric expects
    # the right sum, so the fake judge passes every run.
    "s1": ("What is 1 + 1?", "2"),
    "s2": ("What is 2 + 2?", "4"),
    "s3": ("What is 3 + 3?", "6"),
    "s4": ("What is 4 + 4?", "8"),
    "s5": ("What is 5 + 5?", "10"),
}
JUDGED_CASE = """\
input:
  question: {question!r}
expected:
  answer: {answer!r}
evaluators:
  judge:
    rubric: 'The answer gives the sum. expect "{answer}"'
{library}"""
LIBRARY_JUDGE = "  judges:\n    answer_correctness: true\n"
"""A library judge beside the rubric; the fake judge finds nothing to expect in its rubric
and gives every run 0.5, a pass."""


@dataclass
class Judged:
    token: str
    """The admin's token (the CLI is logged in as admin too)."""
    experiment: int
    runs: dict[str, int]
    """Run id by case id."""


def judged_experiment(
    engine, cli, tmp_path: Path, judge: JudgeServer, *, library: bool = False
) -> Judged:
    """@dev with ``judge`` as the default judge, and an experiment of :data:`SUMS` graded
    by it (every judge score passes); ``library`` adds :data:`LIBRARY_JUDGE`."""
    token = dev_with_default_judge(engine, cli, judge)
    repo = Repo(tmp_path / "repo")
    for case, (question, answer) in SUMS.items():
        extra = LIBRARY_JUDGE if library else ""
        text = JUDGED_CASE.format(question=question, answer=answer, library=extra)
        repo.case("sums", case, text)
    synced = cli("sync", str(repo.suite("sums")), "--workspace", "dev")
    assert synced.code == 0, synced.err
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        ran = cli("run", "sums@dev", "--agent", "ref@dev", "--json")
        assert ran.code == 0, ran.err
    runs = {r["case_id"]: r["id"] for r in ran.json["run_list"]}
    return Judged(token, ran.json["id"], runs)
