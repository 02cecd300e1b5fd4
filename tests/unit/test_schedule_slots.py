"""Schedules without a database: cron checks, slot arithmetic in UTC, names, wire structs, the
CLI's one-line result, and the periodic task's registration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from evalkit.cli.schedules import latest_text
from evalkit.errors import BadRequest
from evalkit.model import schedules as wire
from evalkit.store.schedules import (
    CRON_RULE,
    check_cron,
    default_name,
    latest_slot,
    next_slot,
)

T = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday


def test_cron_fields_are_single_spaced():
    assert check_cron("  0   3 * *  1-5 ") == "0 3 * * 1-5"
    assert check_cron("*/15 * * * *") == "*/15 * * * *"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 * * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),  # croniter's seconds field is not ours
        ("@hourly", "has 1 field:"),
        ("", "has 0 fields"),
        ("61 * * * *", "is not valid"),
        ("0 0 31 2 *", "is not valid"),  # 31 February never comes
        ("a b c d e", "is not valid"),
    ],
)
def test_bad_cron_names_the_expression_and_the_rule(expression, says):
    with pytest.raises(BadRequest) as refused:
        check_cron(expression)
    assert refused.value.code == "bad-cron"
    assert f"cron expression {expression!r} {says}" in refused.value.message
    assert CRON_RULE in refused.value.message


def test_next_slot_is_strictly_after_and_in_utc():
    assert next_slot("0 * * * *", T) == T + timedelta(hours=1)
    assert next_slot("0 * * * *", T - timedelta(seconds=1)) == T
    assert next_slot("30 2 * * 1-5", T) == datetime(2026, 3, 11, 2, 30, tzinfo=UTC)
    # another zone's wall clock is read as the same instant, and the answer is UTC
    paris = T.astimezone(timezone(timedelta(hours=1)))
    answer = next_slot("0 3 * * *", paris)
    assert answer == datetime(2026, 3, 11, 3, 0, tzinfo=UTC) and answer.tzinfo == UTC


def test_latest_slot_is_at_or_before_now():
    assert latest_slot("0 * * * *", T) == T  # exactly on a slot: that slot
    assert latest_slot("0 * * * *", T + timedelta(seconds=59)) == T
    assert latest_slot("0 * * * *", T - timedelta(microseconds=1)) == T - timedelta(hours=1)
    # days of missed slots collapse into the latest one
    assert latest_slot("0 3 * * *", T + timedelta(days=3)) == datetime(
        2026, 3, 13, 3, 0, tzinfo=UTC
    )
    slot = latest_slot("*/5 * * * *", T + timedelta(minutes=7, seconds=30))
    assert slot == T + timedelta(minutes=5)
    assert next_slot("*/5 * * * *", slot) == T + timedelta(minutes=10)


def test_default_name_fits_the_name_rule():
    assert default_name("finance", "ouragent") == "finance-ouragent"
    long = default_name("d" * 40, "a" * 40)
    assert len(long) == 63 and long.startswith("d" * 40 + "-")
    assert default_name("d" * 62, "agent") == "d" * 62  # no trailing '-'


def test_create_body_refuses_unknown_fields_and_bad_repetitions():
    ok = msgspec.json.decode(
        b'{"dataset": "finance@prod", "agent": "bot@prod", "cron": "0 2 * * *"}',
        type=wire.ScheduleCreate,
    )
    assert ok.repetitions == 1 and ok.name is None
    with pytest.raises(msgspec.ValidationError, match="unknown field `every`"):
        msgspec.json.decode(
            b'{"dataset": "d", "agent": "a", "cron": "0 * * * *", "every": "day"}',
            type=wire.ScheduleCreate,
        )
    with pytest.raises(msgspec.ValidationError, match="repetitions"):
        msgspec.json.decode(
            b'{"dataset": "d", "agent": "a", "cron": "0 * * * *", "repetitions": 0}',
            type=wire.ScheduleCreate,
        )


def _schedule(**kw) -> wire.Schedule:
    fields = dict(
        id=1,
        name="nightly",
        workspace="prod",
        dataset="finance@prod",
        agent="bot@prod",
        cron="0 2 * * *",
        split=None,
        case_ids=None,
        repetitions=1,
        model=None,
        created_at=T,
        created_by="admin",
        next_fire_at=T + timedelta(days=1),
        last_fire_at=None,
        fires=0,
        last_error=None,
        latest=None,
    )
    fields.update(kw)
    return wire.Schedule(**fields)


def _latest(status: str, by_state: dict[str, int]) -> wire.ScheduleLatest:
    return wire.ScheduleLatest(
        experiment_id=7,
        status=status,
        created_at=T,
        finished_at=T if status == "finished" else None,
        runs=sum(by_state.values()),
        by_state=by_state,
    )


def test_latest_result_in_one_line():
    assert latest_text(_schedule()) == "no experiment yet"
    finished = _schedule(latest=_latest("finished", {"done": 40, "failed": 2}))
    assert latest_text(finished) == "experiment 7 finished: 40 done, 2 failed"
    running = _schedule(latest=_latest("running", {"done": 3, "running": 2, "queued": 5}))
    assert latest_text(running) == (
        "experiment 7 running: 3/10 finished (3 done, 5 queued, 2 running)"
    )
    refused = _schedule(last_error="no agent bot@prod [no-such-agent]")
    assert latest_text(refused) == "last fire refused: no agent bot@prod [no-such-agent]"
    both = _schedule(last_error="harness down", latest=_latest("finished", {"done": 1}))
    assert latest_text(both) == "last fire refused: harness down; experiment 7 finished: 1 done"


def test_the_tick_is_a_periodic_task_every_minute():
    from evalkit.jobs.app import load_tasks

    app = load_tasks()
    assert "fire_schedules" in app.tasks
    periodic = {t.periodic_id: t.cron for t in app.periodic_registry.periodic_tasks.values()}
    assert periodic["fire-schedules"] == "*/1 * * * *"
