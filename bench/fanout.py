"""Southbound fan-out: one TE cycle across many switches, and the periodic audit's CPU.

The 2,048-GPU spec (rail-2k: 128 leaves) stands in for a large fabric. One
userspace OVS bridge (no ports, no traffic) per leaf, with that leaf's dpid,
connects to a Reconciler and the os-ken app running in this process, as in
the daemon. Each leaf carries a realistic overlay: `entries` elephant moves
whose sender sits below it (one 5-tuple entry each at the leaf; the spines'
single way down needs none). Then, each repeated:

- one:     a TE cycle changes `changed` moves (their spine) on one leaf;
- fan-out: a TE cycle changes `changed` moves on every leaf.

The time is from the decision (the plan handed to the reconciler) to the
last commit reply: `Reconciler.reconcile(te)`, with the commit phase apart.
Then a periodic pass (each switch's entry count, one in `audit_every`
switches read in full) and a full audit (every switch read), in process CPU
(os-ken's receive threads parse the dumps in this process).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from bench import ofctl
from controller.fabric import Fabric, NicId, Tier, load_fabric
from controller.fabric import addressing as ad
from controller.fabric.spec import SPECS_DIR
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.southbound.app import start_openflow
from controller.southbound.overlay import OverlayEntry, OverlayMeter, te_entries
from controller.southbound.reconciler import Reconciler, ReconcileTrigger
from controller.te.engine import Meter, Move
from emulation.net import ovs

SPEC = SPECS_DIR / "rail-2k.yaml"
OWNER = "bench-fanout"
MAX_IN_FLIGHT = 64  # the Reconciler's default
SPARE_DPID = 0xBE0C0000  # the floor's bridge: no switch of the fabric


class Plan:
    """The TE runner's side of a pass (reconciler.TePlanner): a fixed set of moves."""

    def __init__(self, moves: list[Move]) -> None:
        self.moves = moves
        self.generation = 1

    def plan(self) -> tuple[int, list[Move], list[Meter]]:
        return self.generation, self.moves, []

    def adopt(self, entries: list[OverlayEntry], meters: Mapping[int, OverlayMeter]) -> None:
        pass  # the bridges start empty

    def applied(self, generation: int) -> None:
        pass


def leaf_moves(fabric: Fabric, leaf: str, count: int) -> list[Move]:
    """`count` UDP elephants from the NICs below `leaf` to the next pod's same
    rail, spread over the plane's spines."""
    pod, rail = fabric.switch(leaf).pod, fabric.switch(leaf).rail
    assert pod is not None and rail is not None, f"{leaf} is not a leaf"
    servers = sorted(n.server for n in fabric.nics if (n.pod, n.rail) == (pod, rail))
    pods = sorted({n.pod for n in fabric.nics})
    moves = []
    for i in range(count):
        src = NicId(rail, pod, servers[i % len(servers)])
        dst = NicId(rail, pods[(pods.index(pod) + 1) % len(pods)], servers[(i // len(servers)) % len(servers)])
        vias = fabric.vias(src, dst)
        key = (ad.nic_ip(src), ad.nic_ip(dst), "udp", 10000 + i, 4791)
        moves.append(Move(key, src, dst, vias[i % len(vias)], 0.0, 0.0))
    return moves


def shifted(fabric: Fabric, moves: list[Move], count: int) -> list[Move]:
    """The first `count` moves sent over the next spine of their plane."""
    out = list(moves)
    for i, move in enumerate(moves[:count]):
        vias = fabric.vias(move.src, move.dst)
        out[i] = replace(move, via=vias[(vias.index(move.via) + 1) % len(vias)])
    return out


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def _phase_sum(metrics: Metrics, phase: str) -> float:
    return metrics.registry.get_sample_value("railyard_reconcile_phase_seconds_sum", {"phase": phase}) or 0.0


def run(bridges_counts: list[int], entries: int, changed: int, repeats: int, workdir: Path, port: int) -> dict:
    fabric = load_fabric(SPEC)
    leaves = sorted((n for n, s in fabric.switches.items() if s.tier is Tier.LEAF), key=lambda n: fabric.switch(n).dpid)
    most = max(bridges_counts)
    if most > len(leaves):
        raise ValueError(f"--fan-out {most}: {SPEC.name} has {len(leaves)} leaves")
    metrics = Metrics(sorted(fabric.switches))
    store = SqliteIntentStore(workdir / "fanout.db")
    reconciler = Reconciler(
        fabric, IntentService(fabric, store, metrics), metrics, interval_s=3600, max_in_flight=MAX_IN_FLIGHT
    )
    base = {leaf: leaf_moves(fabric, leaf, entries) for leaf in leaves[:most]}
    plan = Plan([m for leaf in leaves[:most] for m in base[leaf]])
    reconciler.te = plan
    start_openflow(reconciler, "127.0.0.1", port)  # no worker thread: this one runs every pass
    names = [f"ryfan{i}" for i in range(most)]
    results: dict = {"spec": SPEC.name, "entries_per_bridge": entries, "changed_per_bridge": changed, "cases": {}}
    try:
        for name, leaf in zip(names, leaves):
            ovs.add_bridge(name, fabric.switch(leaf).dpid, f"tcp:127.0.0.1:{port}", OWNER)
        for count in sorted(bridges_counts):
            _wait(lambda on=set(leaves[:count]): on <= reconciler.connected(), 120, f"{count} bridges to connect")
            plan.moves = [m for leaf in leaves[:count] for m in base[leaf]]
            assert reconciler.reconcile(ReconcileTrigger.CONNECT)
            installed = sum(len(ovs.dump_flows(n)) for n in names[:count])
            assert installed == count * entries, f"{installed} entries installed, {count * entries} wanted"
            results["cases"][str(count)] = _case(
                fabric, reconciler, plan, base, leaves[:count], changed, repeats, workdir
            )
            print(f"{count} bridges: {results['cases'][str(count)]['summary']}", flush=True)
    finally:
        ovs.delete_bridges(names)
        store.close()
    return results


def _cycle(reconciler: Reconciler, plan: Plan, moves: list[Move]) -> dict[str, float]:
    plan.moves, plan.generation = moves, plan.generation + 1
    commit_before = _phase_sum(reconciler.metrics, "commit")
    started = time.perf_counter()
    assert reconciler.reconcile(ReconcileTrigger.TE)
    return {
        "seconds": time.perf_counter() - started,
        "commit_seconds": _phase_sum(reconciler.metrics, "commit") - commit_before,
    }


def _cpu(reconciler: Reconciler, audit_every: int) -> float:
    reconciler.tables.audit_every = audit_every
    started = time.process_time()
    assert reconciler.reconcile(ReconcileTrigger.PERIODIC)
    return time.process_time() - started


def _case(
    fabric: Fabric, reconciler, plan: Plan, base, leaves: list[str], changed: int, repeats: int, workdir: Path
) -> dict:
    one: list[dict[str, float]] = []
    fan: list[dict[str, float]] = []
    sequential: list[dict[str, float]] = []
    floor: list[float] = []
    everything = [m for leaf in leaves for m in base[leaf]]
    for _ in range(repeats):
        # one leaf changes, then back; every leaf changes, then back
        first = shifted(fabric, base[leaves[0]], changed)
        one.append(_cycle(reconciler, plan, first + [m for leaf in leaves[1:] for m in base[leaf]]))
        _cycle(reconciler, plan, everything)
        changed_everywhere = [m for leaf in leaves for m in shifted(fabric, base[leaf], changed)]
        fan.append(_cycle(reconciler, plan, changed_everywhere))
        _cycle(reconciler, plan, everything)
        # The same cycle one switch after another, as before the fan-out.
        reconciler.max_in_flight = 1
        sequential.append(_cycle(reconciler, plan, changed_everywhere))
        reconciler.max_in_flight = MAX_IN_FLIGHT
        _cycle(reconciler, plan, everything)
        # The switches' own floor: all of the cycle's flow-mods are worked by
        # one ovs-vswitchd, whatever the bridge. Its own client installing them
        # on one bridge, in one bundle, is how fast it can take them.
        entries = te_entries(fabric, [m for leaf in leaves for m in shifted(fabric, base[leaf], changed)[:changed]])
        floor.append(ofctl.bundle_install_seconds(entries, SPARE_DPID, workdir))
    audit_every = 6
    periodic = [_cpu(reconciler, audit_every) for _ in range(audit_every)]
    full = _cpu(reconciler, 1)
    per_10k = 10_000 / (len(leaves) * len(base[leaves[0]]))

    def median(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return {
        "one_bridge": one,
        "fan_out": fan,
        "sequential": sequential,
        "ofctl_floor_seconds": floor,
        "periodic_cpu_seconds": periodic,
        "full_audit_cpu_seconds": full,
        "summary": {
            "one_bridge_cycle_seconds": median(one, "seconds"),
            "fan_out_cycle_seconds": median(fan, "seconds"),
            "fan_out_vs_one_bridge_ratio": median(fan, "seconds") / median(one, "seconds"),
            "one_bridge_commit_seconds": median(one, "commit_seconds"),
            "fan_out_commit_seconds": median(fan, "commit_seconds"),
            "fan_out_vs_one_bridge_commit_ratio": median(fan, "commit_seconds") / median(one, "commit_seconds"),
            "sequential_commit_seconds": median(sequential, "commit_seconds"),
            "sequential_vs_one_bridge_commit_ratio": median(sequential, "commit_seconds")
            / median(one, "commit_seconds"),
            "ofctl_floor_seconds": statistics.median(floor),
            "fan_out_commit_vs_ofctl_floor_ratio": median(fan, "commit_seconds") / statistics.median(floor),
            "audit_every_periods": audit_every,
            "periodic_audit_cpu_seconds_per_10k_entries": statistics.mean(periodic) * per_10k,
            "full_audit_cpu_seconds_per_10k_entries": full * per_10k,
        },
    }
