"""The measured load placement reads is the telemetry thread's copy, indexed
before a placement sees it: a placement between two batches neither copies
the view nor indexes the copy (each 5-12 ms of CPU on ft2-16k)."""

from __future__ import annotations

import pytest

from controller.fabric import Endpoint, load_fabric
from controller.metrics import Metrics
from controller.te.load import LoadLedger
from controller.te.view import PortSample
from controller.telemetry.ingest import LOAD_REFRESH_S, LOAD_USABLE_S, Batch, TelemetryIngest

FABRIC = load_fabric()
UPLINK = next(e for egresses in FABRIC.pod_uplinks.values() for e in egresses)


def _ingest(now: list[float]) -> tuple[TelemetryIngest, list[tuple[float, dict, object]]]:
    ingest = TelemetryIngest(Metrics(sorted(FABRIC.switches)), clock=lambda: now[0])
    seen: list[tuple[float, dict, object]] = []
    # What the listener saw, and what a placement would have read at that moment.
    ingest.on_load(lambda load: seen.append((now[0], load, ingest._copy_within(now[0], LOAD_USABLE_S))))
    ingest.start()
    return ingest, seen


def _land(ingest: TelemetryIngest, now: float, bps: float) -> None:
    ingest.arrived.clear()
    ingest.submit(Batch(ports=((UPLINK, PortSample(bps, 0, 0, now)),)))
    assert ingest.arrived.wait(5)


def test_a_placement_reads_the_telemetry_threads_copy_until_it_is_usable_no_more():
    now = [100.0]
    ingest, seen = _ingest(now)
    try:
        _land(ingest, now[0], 1e9)
        first = ingest.fresh_load()
        assert first == {UPLINK: 1e9} and len(seen) == 1 and seen[0][1] is first
        # Past the refresh age, before the next batch: the same copy, not one of its own.
        now[0] += (LOAD_REFRESH_S + LOAD_USABLE_S) / 2
        assert ingest.fresh_load() is first
        # The next batch makes the new copy; the listener had it before any placement could.
        _land(ingest, now[0], 2e9)
        second = ingest.fresh_load()
        assert second is not first and second == ingest.view.fresh_load(now[0]) and len(seen) == 2
        assert seen[1][1] is second and seen[1][2] is first
        # Telemetry stopped: past the usable age a placement copies what is fresh itself.
        now[0] += LOAD_USABLE_S
        own = ingest.fresh_load()
        assert own == second and own is not second and len(seen) == 2
    finally:
        ingest.stop()


def test_the_ledger_keeps_the_index_of_the_copy_before_for_a_placement_still_reading_it(monkeypatch):
    ledger = LoadLedger(FABRIC)
    older, newer = {UPLINK: 1e9}, {UPLINK: 2e9, Endpoint("not-a-switch", 1): 1.0}
    ledger.index_measured(older)
    ledger.index_measured(newer)
    indexed = []
    monkeypatch.setattr(ledger, "index_measured", lambda measured: indexed.append(measured))
    peaks = [ledger.with_measured(m)[0] for m in (older, newer)]
    assert indexed == []
    assert peaks == pytest.approx([bps / FABRIC.capacity_bps[UPLINK] for bps in (1e9, 2e9)])
