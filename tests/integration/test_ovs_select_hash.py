"""The simulator's ECMP hash (emulation/simulate/ovs_hash.py) against real
Open vSwitch: the underlay's select groups, exactly as SelectGroup.ofctl
writes them, on one small userspace-datapath bridge, and ofproto/trace
asked which bucket each of a few hundred TCP and UDP 5-tuples takes.

No fabric, no Mininet: one bridge with a few internal ports to watch,
deleted afterwards.
"""

from __future__ import annotations

import ipaddress
import random
import re
import time

import numpy as np
import pytest

from emulation.net import ovs
from emulation.net.underlay import UPPER_TIER_HASH_PARAM, SelectGroup
from emulation.simulate import ovs_hash

BRIDGE = "ryhash0"
GROUP_SIZES = (2, 3, 4, 8)
PORTS = range(1, max(GROUP_SIZES) + 1)
FLOWS = 200
UPPER = 100  # group id offset of the upper-tier groups

_SCORE = re.compile(r"-> bucket (\d+): score (\d+)")
_NOT_LIVE = re.compile(r"-> bucket (\d+): not live")
_USING = re.compile(r"-> using bucket (\d+)")


def _port_name(port: int) -> str:
    return f"{BRIDGE}p{port}"


def _live_ports() -> set[int]:
    """Ports whose OpenFlow state is LIVE: what a bucket's watch_port checks."""
    out = ovs.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports-desc", BRIDGE])
    live, port = set(), None
    for line in out.splitlines():
        if m := re.match(r"\s*(\d+)\(", line):
            port = int(m.group(1))
        elif m := re.match(r"\s*state:\s*(.*)", line):
            if port is not None and "LIVE" in m.group(1).split():
                live.add(port)
            port = None
    return live


def _set_ports(ports: list[int], state: str, live: set[int]) -> None:
    """Turn ports admin up or down and wait until OVS's liveness follows."""
    for port in ports:
        ovs.run(["ovs-ofctl", "-O", "OpenFlow13", "mod-port", BRIDGE, str(port), state])
    deadline = time.monotonic() + 10
    while _live_ports() & set(PORTS) != live:
        if time.monotonic() > deadline:
            pytest.fail(f"ports of {BRIDGE} did not become live={sorted(live)}: {sorted(_live_ports())}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def bridge():
    ovs.check_running()
    ovs.delete_bridges([BRIDGE])  # a leftover of an interrupted run of this test; no other bridge is touched
    args = ["ovs-vsctl", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE]
    args += ["datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13,OpenFlow15"]
    for port in PORTS:
        name = _port_name(port)
        args += ["--", "add-port", BRIDGE, name, "--", "set", "interface", name, "type=internal"]
        args += [f"ofport_request={port}"]
    try:
        ovs.run(args)
        # One group per size, each exactly as the underlay writes it; reg0 picks the group to trace.
        # Groups UPPER + n: the same with the upper tiers' hash basis.
        groups = [SelectGroup(n, tuple(range(1, n + 1))).ofctl() for n in GROUP_SIZES]
        groups += [SelectGroup(UPPER + n, tuple(range(1, n + 1)), UPPER_TIER_HASH_PARAM).ofctl() for n in GROUP_SIZES]
        flows = [f"priority=10,reg0={g},ip,actions=group:{g}" for n in GROUP_SIZES for g in (n, UPPER + n)]
        ovs.add_groups_and_flows(BRIDGE, groups, flows)
        # Internal ports of a netdev bridge start admin-down (not live): bring them up.
        _set_ports(list(PORTS), "up", set(PORTS))
        yield BRIDGE
    finally:
        ovs.delete_bridges([BRIDGE])


def _flows(seed: int) -> list[tuple[str, str, str, int, int]]:
    rng = random.Random(seed)
    flows = []
    for i in range(FLOWS):
        src = str(ipaddress.IPv4Address(rng.getrandbits(32)))
        dst = str(ipaddress.IPv4Address(rng.getrandbits(32)))
        protocol = "tcp" if i % 2 else "udp"
        flows.append((src, dst, protocol, rng.randrange(1, 65536), rng.randrange(1, 65536)))
    return flows


def _trace(group: int, flow: tuple[str, str, str, int, int]) -> tuple[dict[int, int], set[int], int | None, int | None]:
    """(score per live bucket, dead buckets, the bucket used, the output port) as OVS reports them."""
    src, dst, protocol, sport, dport = flow
    spec = f"in_port=LOCAL,reg0={group},{protocol},nw_src={src},nw_dst={dst},"
    spec += f"{protocol}_src={sport},{protocol}_dst={dport}"
    out = ovs.run(["ovs-appctl", "ofproto/trace", BRIDGE, spec])
    scores = {int(m.group(1)): int(m.group(2)) for m in _SCORE.finditer(out)}
    dead = {int(m.group(1)) for m in _NOT_LIVE.finditer(out)}
    used = _USING.search(out)
    outputs = re.findall(r"^\s*output:(\d+)\s*$", out, re.M)
    return scores, dead, int(used.group(1)) if used else None, int(outputs[-1]) if outputs else None


def _predict(flows: list[tuple[str, str, str, int, int]], param: int = 0) -> np.ndarray:
    src, dst, protocol, sport, dport = zip(*flows)
    return ovs_hash.select_hash(
        np.array([int(ipaddress.IPv4Address(a)) for a in src]),
        np.array([int(ipaddress.IPv4Address(a)) for a in dst]),
        np.array([ovs_hash.TCP if p == "tcp" else ovs_hash.UDP for p in protocol]),
        np.array(sport),
        np.array(dport),
        param,
    )


def test_every_traced_flow_takes_the_bucket_the_simulator_predicts(bridge):
    flows = _flows(seed=7)
    hashes = _predict(flows)
    mismatches = []
    for n in GROUP_SIZES:
        predicted = ovs_hash.best_bucket(hashes, n)
        expected_scores = ovs_hash.bucket_scores(hashes[:, None], np.arange(n, dtype=np.uint32)[None, :])
        for i, flow in enumerate(flows):
            scores, dead, used, port = _trace(n, flow)
            assert not dead
            # Every bucket's score, not just the winner: the hash itself is OVS's.
            if scores != {b: int(s) for b, s in enumerate(expected_scores[i])} or used != predicted[i]:
                mismatches.append((n, flow, scores, used, int(predicted[i])))
            # The bucket's action: output to the port at that index of the group.
            assert port == int(predicted[i]) + 1
    assert not mismatches, f"{len(mismatches)} of {FLOWS * len(GROUP_SIZES)} traces differ: {mismatches[:5]}"


def test_an_upper_tier_group_hashes_with_its_own_basis_as_the_simulator_predicts(bridge):
    flows = _flows(seed=9)[:60]
    hashes = _predict(flows, UPPER_TIER_HASH_PARAM)
    leaf_choice = ovs_hash.best_bucket(_predict(flows), 4)
    for n in (2, 4):
        predicted = ovs_hash.best_bucket(hashes, n)
        for i, flow in enumerate(flows):
            _, _, used, port = _trace(UPPER + n, flow)
            assert used == predicted[i] and port == int(predicted[i]) + 1, (n, flow)
    # Independent of the leaf's choice: about 1 in 4 agree by chance, not all.
    agree = float(np.mean(ovs_hash.best_bucket(hashes, 4) == leaf_choice))
    assert 0.05 < agree < 0.5, agree


def test_a_bucket_whose_port_is_down_is_skipped_as_the_simulator_skips_it(bridge):
    flows = _flows(seed=8)
    hashes = _predict(flows)
    down = 2  # bucket 1 of every group
    _set_ports([down], "down", set(PORTS) - {down})
    try:
        moved = 0
        for n in GROUP_SIZES:
            live = np.arange(1, n + 1) != down
            before = ovs_hash.best_bucket(hashes, n)
            predicted = ovs_hash.best_bucket(hashes, n, live)
            for i, flow in enumerate(flows):
                _, dead, used, port = _trace(n, flow)
                assert dead == {down - 1}
                assert used == predicted[i], (n, flow)
                assert port == int(predicted[i]) + 1
            # Only the flows that were on the dead bucket move.
            assert np.all((predicted == before) | (before == down - 1))
            moved += int((predicted != before).sum())
        assert moved > 0
    finally:
        _set_ports([down], "up", set(PORTS))
