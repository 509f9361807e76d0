"""A joint search cut short by its budget is not run again on the same
inputs within hysteresis_s: at 32K GPUs the budget went on the same link
every cycle, 130 ms of a 250 ms step (make bench-three-tier)."""

import random

import controller.te.engine.plan as plan
from controller.fabric import NicId
from controller.te.engine import Engine, EngineConfig, Snapshot, TeState
from controller.te.engine.fruitless import SEARCHES
from tests.unit.test_engine import World, flow_key
from tests.unit.test_engine_trust import CROWDED

INTERVAL_S = 0.2


def test_a_search_cut_short_waits_out_hysteresis_on_every_link_it_confirmed(monkeypatch):
    """On crowded leaves two links stay congested whatever the routing.
    With one plan a pass, a search weighs one on the first link and none on
    the second; the second is not searched next cycle all the same, and
    the search runs hysteresis_s apart, SEARCHES times in all."""
    monkeypatch.setattr(plan, "EVALUATIONS", (0, 1, 1))
    searched: list[int] = []
    plans_for = plan.Planner.plans_for

    def counted(self, link, allowed):
        searched.append(link)
        return plans_for(self, link, allowed)

    monkeypatch.setattr(plan.Planner, "plans_for", counted)
    rng = random.Random(1)
    flows: dict[tuple, tuple[NicId, NicId, str]] = {}
    for nic in sorted(n for n in CROWDED.nics if n.pod == 0):
        dst = NicId(nic.rail, 1, nic.server)
        flows[flow_key(nic, dst, 40000 + len(flows))] = (nic, dst, rng.choice(CROWDED.vias(nic, dst)))
    world = World(CROWDED, flows)
    eng, state, now = Engine(CROWDED), TeState(), 100.0
    searching: list[int] = []
    for cycle in range(40):
        searched.clear()
        telemetry, ports = world.telemetry(now, state.moves)
        state, _ = eng.step(state, Snapshot(telemetry, ports, now))
        now += INTERVAL_S
        assert len(searched) <= 1
        if searched:
            searching.append(cycle)
    apart = round(EngineConfig().hysteresis_s / INTERVAL_S)
    assert searching == [k * apart for k in range(SEARCHES)]
    assert state.fruitless is not None
    assert len(state.fruitless.links) == 2 and state.fruitless.searches == SEARCHES
