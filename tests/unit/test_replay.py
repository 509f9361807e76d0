"""An emulated run's routing valued in the fluid model (replay.py): with no
path change it is the simulator's own ECMP figure for the same 5-tuples; a
change counts from when it was made, a flow let go goes back to its hash
path; what cannot be replayed is refused by name, or not valued at all."""

from __future__ import annotations

import pytest

from controller.fabric import load_fabric
from controller.te.view import reverse_key
from emulation.model.sharing import Sharing
from emulation.simulate.replay import Replay, Rerouted, routing_worth
from emulation.simulate.run import simulate
from emulation.simulate.traffic import RAILYARD, build_arms
from emulation.workload import load_workload, spec_file

WORKLOAD = load_workload("hedera/randbij0")
FABRIC = load_fabric(spec_file(WORKLOAD))
REPLAY = Replay(FABRIC, build_arms(FABRIC, WORKLOAD, 1)[1][RAILYARD].flows)


def _a_better_path() -> Rerouted:
    """A move of one flow to another of its paths that changes the routing's worth."""
    base = REPLAY.worth(REPLAY.hashed)
    for flow in REPLAY.flows:
        i = REPLAY.position[flow.key]
        for via, route in REPLAY.routes.by_via[i].items():
            if route != REPLAY.hashed[i]:
                change = Rerouted(0.0, flow.key, via)
                if abs(REPLAY.worth(REPLAY.rerouted(REPLAY.hashed, change)) - base) > 1e-3:
                    return change
    raise AssertionError("no single move changes randbij0's routing")


def test_with_no_path_change_the_routing_is_worth_what_the_simulator_says_ecmp_is():
    # The worth is the routing's alone: valued by max-min rates of delivered bytes, not TCP's sharing or framing.
    report = simulate(FABRIC, WORKLOAD, 1, sharing=Sharing.MAX_MIN, framed=False)
    simulated = report.goodput_phases[0].ecmp.fraction_of_optimum
    worth = routing_worth(FABRIC, WORKLOAD, 1, [], 1.0, WORKLOAD.duration_s)
    assert worth is not None
    assert worth.mean == pytest.approx(simulated) and worth.end == pytest.approx(simulated)


def test_a_change_counts_from_when_it_was_made_and_a_flow_let_go_is_hashed_again():
    move = _a_better_path()
    before = REPLAY.worth(REPLAY.hashed)
    after = REPLAY.worth(REPLAY.rerouted(REPLAY.hashed, move))
    half = 1.0 + (WORKLOAD.duration_s - 1.0) / 2
    worth = routing_worth(FABRIC, WORKLOAD, 1, [Rerouted(half, move.key, move.via)], 1.0, WORKLOAD.duration_s)
    assert worth is not None
    assert worth.mean == pytest.approx((before + after) / 2) and worth.end == pytest.approx(after)
    let_go = [Rerouted(0.0, move.key, move.via), Rerouted(half, move.key, "")]
    worth = routing_worth(FABRIC, WORKLOAD, 1, let_go, 1.0, WORKLOAD.duration_s)
    assert worth is not None and worth.end == pytest.approx(before)


def test_a_flow_or_a_path_the_workload_does_not_have_is_refused_by_name_and_acks_change_nothing():
    flow = REPLAY.flows[0].key
    acks = Rerouted(0.0, reverse_key(flow), "rys0")
    assert (REPLAY.rerouted(REPLAY.hashed, acks) == REPLAY.hashed).all()
    with pytest.raises(ValueError, match="is not one of the workload's"):
        REPLAY.rerouted(REPLAY.hashed, Rerouted(0.0, ("10.9.9.9", *flow[1:]), "rys0"))
    with pytest.raises(ValueError, match="no route via 'nowhere'; it has"):
        REPLAY.rerouted(REPLAY.hashed, Rerouted(0.0, flow, "nowhere"))


def test_a_flow_te_moved_that_the_workload_does_not_have_is_left_out_and_named():
    flow = REPLAY.flows[0].key
    stray = ("10.9.9.9", *flow[1:])
    alone = routing_worth(FABRIC, WORKLOAD, 1, [], 1.0, WORKLOAD.duration_s)
    worth = routing_worth(FABRIC, WORKLOAD, 1, [Rerouted(2.0, stray, "rys0")], 1.0, WORKLOAD.duration_s)
    assert worth is not None and alone is not None
    assert (worth.mean, worth.end, worth.strays) == (alone.mean, alone.end, (stray,))


def test_a_workload_whose_flows_do_not_all_send_for_the_whole_run_is_not_valued():
    failing = load_workload("link-failure")
    assert routing_worth(load_fabric(spec_file(failing)), failing, 1, [], 1.0, failing.duration_s) is None
