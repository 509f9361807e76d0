"""OpenFlow statistics polling against the periodic audit, on ft2-16k's switches.

`bridges` userspace OVS bridges stand in for as many of ft2-16k's leaves
(their dpids), each with the leaf's 64 ports (patch ports paired inside the
bridge: counters without kernel devices) and `entries` overlay entries (TE
moves, as in the fan-out case). A Reconciler and os-ken run in this process,
as in the daemon. Measured, in this process's CPU (os-ken parses the
replies here) and in ovs-vswitchd's (the switches answering):

- the periodic audit: `audit_every` periodic passes (each switch's entry
  count, a rotating share read in full), per pass;
- a polling round: every bridge's port statistics (StatsPoller.poll).

Then per second over ft2-16k's 768 switches: the audit at the default
reconcile interval (10 s) against polling every `period_s`, and the period at
which polling costs what the audit does (break-even).

    python -m bench.stats_poll        (also a case of `make bench-southbound`)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench import write_result
from bench.fanout import Plan, leaf_moves
from controller.fabric import Tier, load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.southbound.app import start_openflow
from controller.southbound.reconciler import Reconciler, ReconcileTrigger
from controller.southbound.stats import DEFAULT_INTERVAL_S, StatsPoller
from emulation.net import ovs
from emulation.processes.controller_process import Ports

SPEC = SPECS_DIR / "ft2-16k.yaml"
OWNER = "bench-stats"
RECONCILE_INTERVAL_S = 10.0  # the daemon's default
AUDIT_EVERY = 6  # the daemon's default


def vswitchd_cpu() -> float:
    pid = int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(action) -> tuple[float, float]:
    """(this process's CPU, ovs-vswitchd's CPU) spent on `action`."""
    cpu, switch = time.process_time(), vswitchd_cpu()
    action()
    return time.process_time() - cpu, vswitchd_cpu() - switch


def _add_ports(bridge: str, ports: list[int]) -> None:
    args = ["ovs-vsctl"]
    for a, b in zip(ports[::2], ports[1::2]):
        for mine, peer in ((a, b), (b, a)):
            args += ["--", "add-port", bridge, f"{bridge}p{mine}", "--", "set", "interface", f"{bridge}p{mine}",
                     "type=patch", f"options:peer={bridge}p{peer}", f"ofport_request={mine}"]  # fmt: skip
    ovs.run(args, timeout=120)


def run(bridges: int, entries: int, repeats: int, period_s: float, workdir: Path) -> dict:
    fabric = load_fabric(SPEC)
    leaves = sorted((n for n, s in fabric.switches.items() if s.tier is Tier.LEAF), key=lambda n: fabric.switch(n).dpid)
    chosen = leaves[:bridges]
    metrics = Metrics(sorted(fabric.switches))
    store = SqliteIntentStore(workdir / "stats.db")
    reconciler = Reconciler(fabric, IntentService(fabric, store, metrics), metrics, interval_s=3600)
    plan = Plan([m for leaf in chosen for m in leaf_moves(fabric, leaf, entries)])
    reconciler.te = plan
    port = Ports.pick().openflow
    start_openflow(reconciler, "127.0.0.1", port)
    names = [f"rybs{i}" for i in range(bridges)]
    samples: list = []
    poller = StatsPoller(fabric, reconciler.sessions, metrics, samples.extend, period_s)
    try:
        for name, leaf in zip(names, chosen):
            ovs.add_bridge(name, fabric.switch(leaf).dpid, f"tcp:127.0.0.1:{port}", OWNER)
            _add_ports(name, sorted(fabric.ports(leaf)))
        deadline = time.monotonic() + 120
        while not set(chosen) <= reconciler.connected():
            if time.monotonic() > deadline:
                raise TimeoutError("bridges did not connect")
            time.sleep(0.1)
        assert reconciler.reconcile(ReconcileTrigger.CONNECT)
        poller.poll()  # the first round reads the port descriptions too; measured from the next
        reconciler.tables.audit_every = AUDIT_EVERY
        audits, polls = [], []
        for _ in range(repeats):
            audits += [_measure(lambda: reconciler.reconcile(ReconcileTrigger.PERIODIC)) for _ in range(AUDIT_EVERY)]
            before = len(samples)
            polls.append(_measure(poller.poll))
            assert len(samples) - before == bridges * len(fabric.ports(chosen[0])), "a port without a rate"
    finally:
        ovs.delete_bridges(names)
        store.close()
    per_switch = len(fabric.switches) / bridges
    audit_cpu, audit_switch = (statistics.mean(a[i] for a in audits) * per_switch for i in (0, 1))
    poll_cpu, poll_switch = (statistics.mean(p[i] for p in polls) * per_switch for i in (0, 1))
    return {
        "spec": SPEC.name,
        "switches": len(fabric.switches),
        "bridges_measured": bridges,
        "ports_per_bridge": len(fabric.ports(chosen[0])),
        "overlay_entries_per_bridge": entries,
        "audit_rounds_cpu_seconds": audits,
        "poll_rounds_cpu_seconds": polls,
        "summary": {
            "audit_controller_cpu_per_pass_s": audit_cpu,
            "audit_switches_cpu_per_pass_s": audit_switch,
            "poll_controller_cpu_per_round_s": poll_cpu,
            "poll_switches_cpu_per_round_s": poll_switch,
            "reconcile_interval_s": RECONCILE_INTERVAL_S,
            "poll_period_s": period_s,
            "audit_controller_cpu_per_s": audit_cpu / RECONCILE_INTERVAL_S,
            "poll_controller_cpu_per_s": poll_cpu / period_s,
            "audit_switches_cpu_per_s": audit_switch / RECONCILE_INTERVAL_S,
            "poll_switches_cpu_per_s": poll_switch / period_s,
            "poll_over_audit_controller_ratio": (poll_cpu / period_s) / (audit_cpu / RECONCILE_INTERVAL_S),
            "poll_over_audit_switches_ratio": (poll_switch / period_s) / max(audit_switch / RECONCILE_INTERVAL_S, 1e-9),
            "break_even_period_s": RECONCILE_INTERVAL_S
            * max(poll_cpu / audit_cpu, poll_switch / max(audit_switch, 1e-9)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bridges", type=int, default=32)
    parser.add_argument("--entries", type=int, default=512, help="overlay entries per bridge (default 512)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--period", type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument("--out", default="bench/results/stats-poll.json")
    args = parser.parse_args()
    ovs.check_running()
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        result = run(args.bridges, args.entries, args.repeats, args.period, Path(tmp))
    print(json.dumps(result["summary"], indent=2))
    print(f"wrote {write_result(args.out, result)}", flush=True)
    os._exit(0)  # os-ken's threads cannot be stopped (see bench.southbound)


if __name__ == "__main__":
    main()
