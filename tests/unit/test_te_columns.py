"""The ingest keeps the live view as TE's frames while records arrive: at
any moment they are exactly what converting the view's dictionaries gives
(FlowFrame.of, PortFrame.of), row for row and in the same order, through
new, repeated, older and forgotten records."""

from __future__ import annotations

import random

import numpy as np

from controller.fabric import Endpoint
from controller.metrics import Metrics
from controller.te import columns
from controller.te.engine.frames import FlowFrame, PortFrame
from controller.te.engine.links import LinkIndex
from controller.te.view import FlowSample, PortSample
from controller.telemetry.ingest import Batch, TelemetryIngest
from tests.unit.test_engine import FABRIC

INDEX = LinkIndex(FABRIC)
EGRESSES = list(INDEX.ids)


def _flow_key(rng: random.Random) -> tuple[str, str, str, int, int]:
    return (f"10.0.0.{rng.randint(1, 6)}", f"10.0.1.{rng.randint(1, 6)}", "tcp", rng.randint(1000, 1030), 5201)


def _egress(rng: random.Random) -> Endpoint | None:
    roll = rng.random()
    if roll < 0.2:
        return None
    if roll < 0.25:
        return Endpoint("not-a-switch", 1)  # not an egress of the fabric: UNKNOWN
    return rng.choice(EGRESSES)


def _batch(rng: random.Random, now: float) -> Batch:
    flows = tuple(
        (
            _flow_key(rng),
            FlowSample(rng.uniform(0, 1e9), 0, now - rng.choice([0.0, 0.0, 3.0]), _egress(rng), _egress(rng)),
        )
        for _ in range(rng.randint(0, 20))
    )
    ports = tuple(
        (rng.choice(EGRESSES), PortSample(rng.uniform(0, 1e10), 0, 0, now - rng.choice([0.0, 5.0]), rng.random() > 0.1))
        for _ in range(rng.randint(0, 10))
    )
    return Batch(ports=ports, flows=flows)


def _same_flows(kept: FlowFrame, converted: FlowFrame) -> None:
    assert list(kept.keys) == list(converted.keys)
    for name in ("rate_bps", "observed_at", "ingress", "transit"):
        assert np.array_equal(getattr(kept, name), getattr(converted, name)), name


def _same_ports(kept: PortFrame, converted: PortFrame) -> None:
    for name in ("tx_bps", "observed_at", "up"):
        assert np.array_equal(getattr(kept, name), getattr(converted, name)), name


def test_the_kept_frames_are_the_view_converted_through_every_kind_of_record_and_forgetting(monkeypatch):
    monkeypatch.setattr(columns, "MIN_ROWS", 8)  # grown and compacted many times over
    rng = random.Random(7)
    now = [1000.0]
    ingest = TelemetryIngest(Metrics(sorted(FABRIC.switches)), clock=lambda: now[0])
    ingest.start()
    try:
        ingest.submit(_batch(rng, now[0]))  # some before the columns are asked for: they are taken over
        ingest.keep_columns(INDEX.ids)
        for step in range(400):
            now[0] += rng.choice([0.1, 0.1, 2.0])  # now and then, past the sweep: records are forgotten
            ingest.arrived.clear()
            ingest.submit(_batch(rng, now[0]))
            assert ingest.arrived.wait(5.0)
            if step % 20 == 0:
                with ingest._lock:
                    ingest._forget_before(now[0] - rng.uniform(0, 10))
            frames = ingest.frames()
            assert frames is not None
            flows, ports = ingest.snapshot()
            _same_flows(frames[0], FlowFrame.of(INDEX, flows))
            _same_ports(frames[1], PortFrame.of(INDEX, ports))
    finally:
        ingest.stop()


def test_a_frame_since_a_time_keeps_only_what_was_observed_from_then_on():
    keys = [("a", "b", "tcp", i, 1) for i in range(4)]
    frame = FlowFrame(
        keys, np.arange(4.0), np.array([1.0, 5.0, 2.0, 6.0]), np.zeros(4, np.int64), np.zeros(4, np.int64)
    )
    fresh = frame.since(5.0)
    assert list(fresh.keys) == [keys[1], keys[3]] and list(fresh.rate_bps) == [1.0, 3.0]
    assert frame.since(0.0) is frame
