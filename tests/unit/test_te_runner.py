"""The TE runner between the ingest and the reconciler: each cycle's typed
decisions reach its listeners and the decisions file as JSON records, the
moves reach the reconciler's plan, and the metrics say what it holds."""

from __future__ import annotations

import json

from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.runtime.te_runner import TeRunner
from controller.te.engine import Decision, DecisionKind
from controller.telemetry.ingest import Batch, TelemetryIngest
from tests.unit.test_engine import FABRIC, collided_world


def test_a_collision_is_moved_and_each_decision_is_published_as_a_record(tmp_path):
    metrics = Metrics(sorted(FABRIC.switches))
    ingest = TelemetryIngest(metrics)
    ingest.start()
    intent = IntentService(FABRIC, SqliteIntentStore(tmp_path / "i.db"), metrics)
    now = [100.0]
    runner = TeRunner(FABRIC, ingest, intent, metrics, clock=lambda: now[0], decisions_file=tmp_path / "d.jsonl")
    heard: list[Decision] = []
    runner.on_decisions(heard.extend)
    world = collided_world()
    try:
        for _ in range(10):
            flows, ports = world.telemetry(now[0], {m.key: m for m in runner.plan()[1]})
            ingest.arrived.clear()
            ingest.submit(Batch(ports=tuple(ports.items()), flows=tuple(flows.items())))
            assert ingest.arrived.wait(5.0)
            runner.cycle()
            now[0] += 0.2
        generation, moves, _ = runner.plan()
        assert len(moves) == 1 and moves[0].via == "rys1"  # one of the two collided flows, to the free spine
        runner.applied(generation)
    finally:
        ingest.stop()
        intent.close()
    kinds = [d.kind for d in heard]
    assert DecisionKind.COLLISION in kinds and kinds.count(DecisionKind.REROUTE) == 1
    records = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert [Decision.from_record(r) for r in records] == heard
    move = next(d for d in heard if d.kind is DecisionKind.REROUTE)
    assert (move.from_via, move.to_via) == ("rys0", "rys1") and move.flow in world.flows
    assert metrics.te_moves_active._value.get() == 1
    assert metrics.te_cache_entries.labels("flow_keys")._value.get() >= 2
    assert metrics.te_reaction._sum.get() >= 0 and metrics.te_cycle._sum.get() > 0
