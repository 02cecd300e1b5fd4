"""What the CLI's driver posts for a trajectory its harness client read as bytes: the text
(``raw``), which every server version reads, not the bytes (base64 on the wire, a third
larger, and a field older servers refuse)."""

from __future__ import annotations

import msgspec

from evalkit.model.runs import TrajectoryRecord, Transition
from evalkit.runs.local import as_posted


def transition(record: TrajectoryRecord | None) -> Transition:
    return Transition(run_id=1, from_state="collecting", to_state="scoring", trajectory=record)


def test_bytes_read_from_the_harness_are_posted_as_text() -> None:
    data = '{"steps": ["\u2014 \U0001f600"]}'.encode() + b"\xff"
    record = TrajectoryRecord(source="harness", received=data, partial=True)
    body = msgspec.json.decode(msgspec.json.encode(as_posted(transition(record))))
    assert body["trajectory"] == {
        "source": "harness",
        "raw": data.decode("utf-8", "replace"),
        "partial": True,
    }


def test_other_transitions_are_posted_as_they_are() -> None:
    for record in (
        None,
        TrajectoryRecord(source="harness", raw="{}"),
        TrajectoryRecord(source="harness", fetch_error="x"),
    ):
        assert as_posted(transition(record)) == transition(record)
