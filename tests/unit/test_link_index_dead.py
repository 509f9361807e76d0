"""The egresses a drain kills (LinkIndex.dead), found from the drains, are
those the per-path check (load.drained) finds drained one egress at a
time: every link of a drained switch, both ways; both ways of a drained
link; nothing for a name the fabric does not have. The padding id never."""

from __future__ import annotations

import random

import pytest

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.te.engine.links import LinkIndex
from controller.te.jobs import Drains
from controller.te.load import drained, link_name


@pytest.mark.parametrize("spec", ["default.yaml", "three-tier.yaml"])
def test_a_drains_dead_egresses_are_those_its_paths_find_drained(spec):
    fabric = load_fabric(SPECS_DIR / spec)
    index = LinkIndex(fabric)
    names = sorted({link_name(fabric, fabric.link_at(e)) for e in index.egresses})
    switches = sorted(fabric.switches)
    rng = random.Random(7)
    for _ in range(30):
        links = set(rng.sample(names, rng.randint(0, 3)))
        links |= {"no-such-switch:1", f"{switches[0]}:999", f"{switches[0]}:x"}
        drains = Drains(frozenset(rng.sample(switches, rng.randint(0, 2))), frozenset(links))
        mask = index.dead(drains)
        expected = [drained(fabric, drains, [e]) != "" for e in index.egresses]
        assert mask[:-1].tolist() == expected
        assert not mask[index.pad]
        assert mask.any() == bool(drains.switches or links & set(names))


def test_a_link_named_by_its_other_end_is_not_a_drain_of_it():
    """Drains hold canonical names (intent loading makes them so); the
    other end's name names no link, here as on the per-path check."""
    fabric = load_fabric(SPECS_DIR / "default.yaml")
    index = LinkIndex(fabric)
    link = next(fabric.link_at(e) for e in index.egresses if e.port and not fabric.link_at(e).is_access)
    canonical = link_name(fabric, link)
    other = next(f"{e.node}:{e.port}" for e in (link.a, link.b) if f"{e.node}:{e.port}" != canonical)
    assert index.dead(Drains(links=frozenset({canonical}))).sum() == 2
    assert not index.dead(Drains(links=frozenset({other}))).any()
