"""The max-min optimum the scenario reports compare against."""

import pytest

from controller.fabric import NicId, load_fabric
from emulation.model.optimum import ModelFlow, max_min_rates, optimum

FABRIC = load_fabric()  # 50 Mb/s emulated NICs, 2 spines, uplinks 50 Mb/s


def test_progressive_filling_on_a_textbook_case():
    # Link a (10) shared by flows 0,1; link b (4) carries flow 1 only: 1 gets 4, 0 gets the rest of a.
    rates = max_min_rates({"a": 10.0, "b": 4.0}, [["a"], ["a", "b"]], [float("inf")] * 2)
    assert rates == pytest.approx([6.0, 4.0])
    assert max_min_rates({"a": 10.0}, [["a"], ["a"]], [3.0, float("inf")]) == pytest.approx([3.0, 7.0])


def test_permutation_optimum_is_every_nic_at_line_rate():
    flows = [ModelFlow(nic, NicId(nic.rail, 1 - nic.pod, nic.server)) for nic in FABRIC.nics]
    best = optimum(FABRIC, flows)
    assert best.aggregate_bps == pytest.approx(8 * 50e6)
    # Two flows leave each leaf, one per spine.
    for leaf_src in ((0, 0), (0, 1), (1, 0), (1, 1)):
        vias = [v for f, v in zip(flows, best.vias) if (f.src.pod, f.src.rail) == leaf_src]
        assert sorted(vias) == ["rys0", "rys1"]


def test_incast_optimum_shares_the_receiver_fairly():
    dst = NicId(0, 1, 0)
    flows = [
        ModelFlow(NicId(0, 0, 0), dst),
        ModelFlow(NicId(0, 0, 1), dst),
        ModelFlow(NicId(0, 1, 1), dst),
        ModelFlow(NicId(1, 0, 0), NicId(1, 1, 0)),
    ]  # a bystander on another rail
    best = optimum(FABRIC, flows)
    assert best.rates_bps[:3] == pytest.approx([50e6 / 3] * 3)
    assert best.rates_bps[3] == pytest.approx(50e6)


def test_optimum_after_a_link_failure_routes_around_it():
    flows = [ModelFlow(nic, NicId(nic.rail, 1 - nic.pod, nic.server)) for nic in FABRIC.nics]
    best = optimum(FABRIC, flows, dead_links=["ryl0r0:3"])
    # ryl0r0 keeps one 50 Mb/s uplink for its two senders and one downlink for
    # its two receivers: those four flows get 25 each, rail 1's four keep 50.
    assert best.aggregate_bps == pytest.approx(4 * 50e6 + 4 * 25e6)
    assert all(rate > 0 for rate in best.rates_bps)
