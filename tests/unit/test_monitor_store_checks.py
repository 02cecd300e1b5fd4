"""The pure parts of store/monitors.py: sampling by hash, and the checks of bad input."""

import pytest

from evalkit.errors import BadRequest
from evalkit.store import monitors


def test_sampling_is_deterministic_and_near_the_rate():
    ids = [f"session-{i}" for i in range(2000)]
    first = [monitors.sampled(7, s, 0.5) for s in ids]
    assert first == [monitors.sampled(7, s, 0.5) for s in ids]
    assert 850 < sum(first) < 1150
    assert not any(monitors.sampled(7, s, 0.0) for s in ids)
    assert all(monitors.sampled(7, s, 1.0) for s in ids)
    # Another monitor picks another half.
    assert first != [monitors.sampled(8, s, 0.5) for s in ids]


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_bad_sample_rate_names_the_rule(rate):
    with pytest.raises(BadRequest) as exc:
        monitors.check_sample_rate(rate)
    assert "from 0 to 1" in exc.value.message


def test_unknown_gauge_lists_the_choices():
    with pytest.raises(BadRequest) as exc:
        monitors.check_gauges(["latency", "exact_match"])
    assert "'exact_match'" in exc.value.message and "tool_call_count" in exc.value.message
    assert monitors.check_gauges(["tokens", "latency", "tokens"]) == ["latency", "tokens"]
