"""A batch's spans grouped by trace (``evalkit.otel.otlp.group_by_trace``), what the store
counts before it claims the traces: each trace's spans, times, bytes and root, and whether a
span comes twice. The C pass (``_native.traces``) is held to the Python one on generated
batches where trace ids, span ids and start times collide, and both to examples worked out
by hand (the Python one is what a wheel built without a C compiler runs)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.otel.otlp import Incoming, TraceGroup, group_by_trace, group_in_python, native
from tests.fuzz.conftest import examples

compiled = pytest.mark.skipif(native is None, reason="evalkit/otel/_native.c is not compiled")
both = pytest.mark.parametrize(
    "group",
    [
        pytest.param(lambda spans: native.traces(spans, TraceGroup), id="c", marks=compiled),
        pytest.param(group_in_python, id="python"),
    ],
)


def span(
    trace: int, span_id: int, parent: int | None, start: int, end: int, size: int = 100
) -> Incoming:
    return Incoming(
        trace_id=bytes([trace]) * 16,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=None if parent is None else parent.to_bytes(8, "big"),
        name="",
        kind=0,
        start_ns=start,
        end_ns=end,
        status_code=0,
        status_message=None,
        body=b"",
        size=size,
        resource_body=b"",
        scope=None,
        resource={},
    )


def shape(found: tuple[list[TraceGroup], bool], spans: list[Any]) -> tuple[Any, bool]:
    """The groups with each span named by its place in ``spans`` (the same objects)."""
    place = {id(s): i for i, s in enumerate(spans)}
    groups, twice = found
    return [
        (trace_id, [place[id(s)] for s in members], first, last, size, root and place[id(root)])
        for trace_id, members, first, last, size, root in groups
    ], twice


@both
def test_each_group_names_its_fields(group):
    root, child = span(1, 10, None, 40, 100, 30), span(1, 11, 10, 30, 60, 10)
    [found], twice = group([child, root])
    assert isinstance(found, TraceGroup) and not twice
    assert (found.trace_id, found.first_ns, found.last_ns, found.size) == (
        b"\x01" * 16,
        30,
        100,
        40,
    )
    assert found.spans == [child, root] and found.root is root


@compiled
def test_the_group_type_must_be_a_tuple():
    with pytest.raises(TypeError, match="group_type must be a tuple subclass, not dict"):
        native.traces([], dict)


@both
def test_traces_in_the_order_they_first_come_with_their_times_bytes_and_root(group):
    spans = [
        span(1, 11, parent=10, start=50, end=90, size=10),
        span(2, 20, parent=None, start=5, end=6, size=20),
        span(1, 10, parent=None, start=40, end=100, size=30),
        span(1, 12, parent=10, start=30, end=60, size=40),
        span(3, 30, parent=99, start=7, end=8, size=50),
    ]
    assert shape(group(spans), spans) == (
        [
            (b"\x01" * 16, [0, 2, 3], 30, 100, 80, 2),
            (b"\x02" * 16, [1], 5, 6, 20, 1),
            (b"\x03" * 16, [4], 7, 8, 50, None),  # its root has not come
        ],
        False,
    )


@both
def test_the_root_is_the_earliest_span_without_a_parent_then_the_least_span_id(group):
    spans = [
        span(1, 9, parent=None, start=20, end=30),
        span(1, 8, parent=None, start=20, end=30),
        span(1, 7, parent=None, start=21, end=30),
        span(1, 1, parent=8, start=10, end=30),  # earlier, but it has a parent
    ]
    assert shape(group(spans), spans)[0][0][5] == 1
    spans[2].start_ns = 19
    assert shape(group(spans), spans)[0][0][5] == 2


@both
def test_a_span_twice_is_its_trace_id_and_span_id_twice(group):
    one_id_in_two_traces = [span(1, 5, None, 1, 2), span(2, 5, None, 1, 2)]
    assert group(one_id_in_two_traces)[1] is False
    sent_twice = [span(1, 5, None, 1, 2), span(2, 6, 5, 1, 2), span(1, 5, None, 1, 2)]
    assert group(sent_twice)[1] is True
    assert group([]) == ([], False)


@compiled
def test_objects_without_slots_are_read_by_name_and_bad_fields_are_refused():
    spans = [span(1, 1, None, 1, 5), span(1, 2, 1, 2, 3)]
    plain = [SimpleNamespace(**{f: getattr(s, f) for f in Incoming.__slots__}) for s in spans]
    assert shape(native.traces(plain, TraceGroup), plain) == shape(
        native.traces(spans, TraceGroup), spans
    )
    with pytest.raises(AttributeError):
        native.traces([SimpleNamespace(trace_id=b"\x01" * 16)], TraceGroup)
    spans[1].span_id = b"\x01" * 7
    with pytest.raises(TypeError, match="span_id is not 8 bytes"):
        native.traces(spans, TraceGroup)
    spans[1].span_id, spans[1].start_ns = b"\x01" * 8, "2"
    with pytest.raises(TypeError, match="start_ns is str"):
        native.traces(spans, TraceGroup)


batches = st.lists(
    st.builds(
        span,
        trace=st.integers(1, 4),
        span_id=st.integers(1, 6),
        parent=st.one_of(st.none(), st.integers(1, 6)),
        start=st.integers(0, 4),
        end=st.integers(0, 2**63 - 1),
        size=st.integers(0, 2**31 - 1),
    ),
    max_size=40,
)


@compiled
@settings(max_examples=examples(300))
@given(batches)
def test_the_c_pass_groups_as_python_does(spans):
    assert shape(group_by_trace(spans), spans) == shape(group_in_python(spans), spans)
