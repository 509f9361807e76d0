"""The fat-tree and rail-only builders also come up on real OVS and route every pair."""

import pytest

from controller.fabric import build_fabric, load_spec
from controller.fabric.spec import SPECS_DIR
from emulation.net.fabric import EmulatedFabric
from emulation.traffic.probes import rail_pairs, unreachable_pairs


@pytest.mark.parametrize("spec", ["fat-tree-k4.yaml", "rail-only.yaml"])
def test_fabric_kind_routes_every_pair(spec):
    fabric = build_fabric(load_spec(SPECS_DIR / spec))
    with EmulatedFabric(fabric) as emu:
        pairs = rail_pairs(fabric)
        assert pairs and unreachable_pairs(emu, pairs) == []
