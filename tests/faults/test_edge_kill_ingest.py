"""Issue 11: the edge killed with SIGKILL while OpenTelemetry exporters send it spans.

The edge is the real ``evalkit server`` in a subprocess on the test's database; the
senders are the real OTLP/HTTP exporter of the OpenTelemetry SDK, called directly
(``exporter.export``) from a few threads, each export retried by the exporter itself
(connection errors and 429/502/503/504, with backoff, within its timeout). The edge is
killed at random moments and started again on the same port. The senders reach it through
a loopback proxy that, before some kills, holds the edge's answers back, so those kills
lose answers to exports the edge has committed: the window between commit and reply that
a kill hits only by luck.

The promise under test: an export the edge answered 200 is committed, and a span is stored
once however often its export is sent (the exporter's retries of an export whose answer
was lost, and an application sending again what the exporter gave up on).

``EVALKIT_FAULT_SEED=N`` replays the ids and the kill schedule (the machine's timing still
varies, so a replay lands close to, not exactly on, the same moments).
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.faults.processes import EdgeProcess, fault_seed, says
from tests.faults.proxy import LossyProxy
from tests.faults.spans import (
    ExporterLog,
    Senders,
    admin_token,
    exporter,
    keys,
    make_batches,
    pending_traces,
    rootless_traces,
    session_counts,
    sessions_of,
    stored_counts,
    traced_agent,
)

SENDERS = 3
BATCH_SPANS = 50
"""Not a multiple of a trace's 3 spans: traces straddle batches."""
TRACES_MADE = 8000
"""Far more than the senders get through before the last kill: they never run dry."""
KILLING_SECONDS = 60.0
"""No kill after this long (the third on): an edge start takes 3 s on an idle machine
and 25 s on a busy one, and the test must stay near two minutes."""


@pytest.mark.slow
def test_edge_killed_during_otlp_ingest(database_url, tmp_path: Path):
    seed = fault_seed()
    rng = random.Random(seed)
    context = f"fault seed {seed} (EVALKIT_FAULT_SEED={seed} replays the ids and the kills)"
    began = time.monotonic()
    batches = make_batches(rng, TRACES_MADE, BATCH_SPANS)
    edge = EdgeProcess(database_url, tmp_path)
    proxy = LossyProxy(edge.port)
    senders: Senders | None = None
    try:
        edge.start()
        ready_after = [edge.wait_ready(context)]
        admin = admin_token(edge.url)
        r = httpx.post(
            f"{edge.url}/api/workspaces",
            json={"name": "dev"},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert r.status_code == 201, r.text
        token = traced_agent(edge, admin, "dev")

        with ExporterLog() as exporter_log:
            senders = Senders(proxy.url, token, batches, threads=SENDERS).start()
            # ---- kill at random moments while exports are under way; restart on the same
            # port. Half the kills (the first always) hold the edge's answers back first.
            kills: list[dict[str, Any]] = []
            killing_since = time.monotonic()
            for n in range(rng.randint(4, 5)):
                if n >= 2 and time.monotonic() - killing_since > KILLING_SECONDS:
                    break
                time.sleep(rng.uniform(0.1, 1.5))
                if n == 0 or rng.random() < 0.5:
                    proxy.hold()
                    deadline = time.monotonic() + 5
                    while not proxy.held() and time.monotonic() < deadline:
                        time.sleep(0.005)
                    time.sleep(rng.uniform(0, 0.2))
                in_flight = senders.in_flight()
                edge.kill()
                lost = proxy.drop_held()
                delay = rng.choice([0.0, 0.0, 0.0, 1.0])
                kills.append({"in_flight": len(in_flight), "lost": lost, "restart_after": delay})
                time.sleep(delay)
                edge.start()
                ready_after.append(edge.wait_ready(context))
            context += f"; kills: {kills}"
            time.sleep(0.5)
            acked, given_up = senders.finish()
        exported = len(acked) + len(given_up)
        assert exported > len(kills), says(context, "too few exports to say anything")
        lost_after_commit = sum(1 for line in proxy.lost_answers if line.split()[1:2] == [b"200"])
        assert lost_after_commit, says(context, "no kill lost a committed export's answer")

        # ---- every acknowledged span is stored exactly once; nothing is stored twice
        stored = stored_counts(database_url)
        sent = keys(batches[:exported])
        acked_keys = keys([batches[i] for i in acked])
        missing = sorted(acked_keys - set(stored))
        assert not missing, says(context, f"{len(missing)} acknowledged spans not stored", missing)
        twice = {k: n for k, n in stored.items() if n > 1}
        assert not twice, says(context, "spans stored more than once", twice)
        strangers = set(stored) - sent
        assert not strangers, says(context, "stored spans nobody sent", sorted(strangers))
        committed_unanswered = len(set(stored) - acked_keys)

        # ---- an application sends again what the exporter gave up on, and one export that
        # was acknowledged (a client that lost the answer): still once each
        again = [*given_up, *([rng.choice(acked)] if acked else [])]
        resend = exporter(edge.url, token)
        try:
            for index in again:
                result = resend.export(batches[index])
                assert result is SpanExportResult.SUCCESS, says(context, edge.tail())
        finally:
            resend.shutdown()
        stored = stored_counts(database_url)
        assert set(stored) == sent, says(
            context, f"after sending again: {len(sent - set(stored))} spans missing"
        )
        twice = {k: n for k, n in stored.items() if n > 1}
        assert not twice, says(context, "spans stored more than once after sending again", twice)

        # ---- the collector's counts count each span once too: every trace whose root was
        # sent is in its session with its 3 spans, the others wait for their root
        waiting = rootless_traces(batches[:exported])
        assert pending_traces(database_url) == waiting, says(context, "traces waiting for root")
        sessions = session_counts(database_url)
        assert set(sessions) == sessions_of(batches[:exported]), says(context, "sessions")
        wrong = {s: n for s, n in sessions.items() if n != 3}
        assert not wrong, says(context, "sessions whose span count is not 3", wrong)

        print(
            f"\n{context}\n{len(sent)} spans in {exported} exports of {BATCH_SPANS}, "
            f"{SENDERS} senders; {len(kills)} kills, {edge.starts} edge starts (ready after "
            f"{statistics.median(ready_after):.1f} s median, {max(ready_after):.1f} s max); "
            f"acknowledged {len(acked_keys)} spans ({len(acked)} exports); answers lost after "
            f"the commit {lost_after_commit} (of {len(proxy.lost_answers)} held); exporter "
            f"retries {exporter_log.retries}; exports the exporter gave up on {len(given_up)} "
            f"(spans of them committed anyway: {committed_unanswered}; why: "
            f"{dict(exporter_log.gave_up)}); stored {sum(stored.values())}, each once; "
            f"{time.monotonic() - began:.1f} s in all"
        )
    finally:
        if senders is not None:
            senders.stop.set()
        proxy.stop()
        edge.stop()
