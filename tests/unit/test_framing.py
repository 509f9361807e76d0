"""What a delivered byte costs on the wire in the simulator (framing.py):
a frame's headers on every link of the flow's route, TCP's ACKs at the two
NIC ends, off the top of the links; none of it in the optimum."""

from __future__ import annotations

import pytest

from emulation.simulate.arms import run_static
from emulation.simulate.conditions import conditions
from emulation.simulate.framing import Framing
from emulation.simulate.prepared import prepare, spray_routing
from emulation.simulate.routes import Network
from emulation.simulate.run import RESOLVE_S, simulate
from emulation.simulate.traffic import arm_of
from emulation.workload import parse_workload
from emulation.workload.events import check_events
from emulation.workload.expand import expand
from emulation.workload.placers import railyard_placer
from tests.unit.test_simulate import DEMO, PERMUTATION
from tests.unit.test_simulate_iterations import NIC_BPS, RING_ALONE, SHARING

JUMBO = Framing(9000)
# A NIC that sends one TCP flow and receives another: its frames and the ACKs of what it receives.
TCP_BOTH_WAYS = 1 / (JUMBO.frame_per_byte("tcp") + JUMBO.ack_per_byte("tcp"))


def test_a_jumbo_frame_carries_a_tcp_segment_with_timestamps_and_every_second_one_is_acked():
    assert JUMBO.frame_per_byte("tcp") == 9014 / 8948
    assert JUMBO.frame_per_byte("udp") == 9014 / 8972
    assert JUMBO.ack_per_byte("tcp") == 66 / (2 * 8948)
    assert JUMBO.ack_per_byte("udp") == 0.0
    assert abs(TCP_BOTH_WAYS - 0.98906) < 1e-5  # what the emulation reads on a stride


@pytest.mark.parametrize(("protocol", "delivered"), [("tcp", TCP_BOTH_WAYS), ("udp", 8972 / 9014)])
def test_a_permutation_sprayed_delivers_what_its_frames_leave_of_each_nic(protocol, delivered):
    workload = parse_workload(PERMUTATION.replace("protocol: tcp", f"protocol: {protocol}"))
    framed = simulate(DEMO, workload, 3).goodput_phases[0]
    unframed = simulate(DEMO, workload, 3, framed=False).goodput_phases[0]
    assert framed.optimum.aggregate_bps == unframed.optimum.aggregate_bps  # the optimum counts delivered bytes alone
    assert unframed.spray.fraction_of_optimum == pytest.approx(1.0)
    assert framed.spray.fraction_of_optimum == pytest.approx(delivered, rel=1e-4)


def test_a_ring_iterates_as_much_longer_as_its_frames_and_acks_take():
    workload = check_events(parse_workload(RING_ALONE), DEMO)
    arm = arm_of("test", expand(DEMO, workload, 1, railyard_placer(DEMO)))
    prep = prepare(Network(DEMO), arm, links_die=False)
    timeline = run_static(prep, conditions(DEMO, []), workload.duration_s, RESOLVE_S, spray_routing, SHARING)
    alone = arm.jobs[0].flow_bytes * 8 / NIC_BPS
    assert [it.time_s for it in timeline.iterations] == pytest.approx([alone / TCP_BOTH_WAYS] * 3, rel=1e-4)
