"""How a remote evaluator's 200 answer is read into scores (evalkit.scoring.remote):
entries that break the Custom Evaluator API become errors or notes, never lost silently."""

from __future__ import annotations

import msgspec

from evalkit.scoring.remote import MAX_EXPLANATION, MAX_SCORES, _read_scores


def read(*scores: object, kind: str = "evaluator") -> dict[str, object]:
    items = _read_scores("tone", kind, msgspec.json.encode({"scores": list(scores)}))
    return {item.name: item for item in items}


def test_the_first_broken_entry_of_a_name_is_the_one_kept():
    items = read(
        {"name": "polite", "score": 2},
        {"name": "polite", "score": "high"},
    )
    assert list(items) == ["tone.polite"]
    error = items["tone.polite"].error
    assert error.startswith("score 'polite' breaks the Custom Evaluator API:")
    assert "<= 1.0" in error  # the first entry's problem (2 is out of range), not the second's


def test_problems_are_added_to_the_error_of_the_evaluators_own_broken_score():
    items = read({"name": "tone", "score": 5}, {"name": "", "score": 1})
    own = items["tone"]
    assert own.value is None
    first, note = own.error.split("; ", 1)
    assert first.startswith("score 'tone' breaks the Custom Evaluator API:")
    assert note == "score #2: the name must be 1 to 100 printable characters"


def test_a_reading_keeps_its_value_and_takes_the_problems_into_its_explanation():
    items = read(
        {"name": "tone", "score": 0.5, "explanation": "Mostly calm."},
        {"name": "tone", "score": 1},
    )
    own = items["tone"]
    assert own.value == 0.5 and own.error is None
    assert own.explanation == "Mostly calm. (score 'tone' appears twice; the first one was kept)"


def test_a_long_explanation_is_cut_and_says_so():
    items = read({"name": "tone", "score": 1, "explanation": "x" * (MAX_EXPLANATION + 5)})
    explanation = items["tone"].explanation
    assert explanation == "x" * MAX_EXPLANATION + " [cut]"


def test_scores_past_the_limit_are_left_out_and_counted():
    many = [{"name": f"s{n}", "score": 1} for n in range(MAX_SCORES + 3)]
    items = read(*many)
    assert len(items) == MAX_SCORES + 1  # the evaluator's own score carries the note
    assert "tone.s99" in items and "tone.s100" not in items
    assert items["tone"].error == (
        "the answer breaks the Custom Evaluator API: 3 scores past the first 100 were left out"
    )


def test_a_gauge_evaluator_gives_gauges_unless_an_entry_says_otherwise():
    items = read(
        {"name": "length", "score": 0.4},
        {"name": "verdict", "score": 1, "kind": "score"},
        {"name": "broken", "score": -1},
        kind="gauge",
    )
    assert items["tone.length"].kind == "gauge"
    assert items["tone.verdict"].kind == "evaluator"
    assert items["tone.broken"].kind == "gauge" and items["tone.broken"].error
