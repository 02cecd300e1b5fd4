"""How often an evaluator agrees with the people who labelled its runs.

Each run with a stored score and at least one human label gives one pair: the evaluator's
verdict and the people's. The people's verdict is the majority of each labeller's latest
label on that score (a later label by the same person replaces their earlier reading in
this count, though both stay stored); a tie between labellers is no verdict, and the run is
counted as ``split`` instead. Verdicts are pass/fail at ``PASS_THRESHOLD``, as everywhere in
scoring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from evalkit.model.stats import Agreement, Disagreement
from evalkit.scoring.stats import passes, wilson_interval


@dataclass(frozen=True, slots=True)
class Reading:
    """One labeller's latest label of one score of one run, beside the stored score."""

    run_id: int
    case_id: str
    name: str
    scored: float
    labelled: float
    labeller: int | None


def agreements(readings: Iterable[Reading]) -> list[Agreement]:
    by_name: dict[str, dict[int, list[Reading]]] = defaultdict(lambda: defaultdict(list))
    for reading in readings:
        by_name[reading.name][reading.run_id].append(reading)
    return [_agreement(name, runs) for name, runs in sorted(by_name.items())]


def people_verdict(labels: list[float]) -> bool | None:
    """The majority verdict of the labellers; None on a tie."""
    passing = sum(1 for value in labels if passes(value))
    failing = len(labels) - passing
    if passing == failing:
        return None
    return passing > failing


def _agreement(name: str, runs: dict[int, list[Reading]]) -> Agreement:
    table = {"pass_pass": 0, "pass_fail": 0, "fail_pass": 0, "fail_fail": 0}
    disagreements: list[Disagreement] = []
    split = 0
    for run_id, readings in sorted(runs.items()):
        people = people_verdict([r.labelled for r in readings])
        if people is None:
            split += 1
            continue
        scored = passes(readings[0].scored)
        table[f"{_word(scored)}_{_word(people)}"] += 1
        if scored != people:
            disagreements.append(
                Disagreement(
                    run_id=run_id,
                    case_id=readings[0].case_id,
                    scored=readings[0].scored,
                    people_pass=people,
                    labellers=len(readings),
                )
            )
    n = sum(table.values())
    agree = table["pass_pass"] + table["fail_fail"]
    return Agreement(
        name=name,
        runs=n,
        agree=agree,
        rate=agree / n if n else None,
        interval=wilson_interval(agree, n),
        kappa=cohens_kappa(table),
        confusion=table,
        split=split,
        disagreements=disagreements,
    )


def cohens_kappa(table: dict[str, int]) -> float | None:
    """Cohen's kappa of the evaluator against the people; None when chance agreement is
    certain (both always said the same one verdict), where kappa is undefined."""
    n = sum(table.values())
    if not n:
        return None
    observed = (table["pass_pass"] + table["fail_fail"]) / n
    scored_pass = (table["pass_pass"] + table["pass_fail"]) / n
    people_pass = (table["pass_pass"] + table["fail_pass"]) / n
    chance = scored_pass * people_pass + (1 - scored_pass) * (1 - people_pass)
    if chance >= 1:
        return None
    return (observed - chance) / (1 - chance)


def _word(verdict: bool) -> str:
    return "pass" if verdict else "fail"
