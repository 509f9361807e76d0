"""Southbound benchmark: flow-mods/s through bundles, reconciling 10k entries,
and what polling OpenFlow statistics costs against the periodic audit
(bench/stats_poll.py, on ft2-16k's switches).

One OVS bridge (userspace datapath, no ports) stands in for leaf ryl0r0 of
the demo fabric: same dpid, so the controller takes it for that leaf. The
intent store is preloaded with N forward-only 5-tuple pins, each giving
exactly one overlay entry on that leaf. Then, each repeated:

- install:  the real daemon starts, the switch connects, the connect
            reconcile dumps an empty overlay and commits N adds in one bundle;
- steady:   the daemon is killed (-9) and restarted; the connect reconcile
            dumps N entries, finds nothing to change and sends nothing;
- baseline: `ovs-ofctl --bundle add-flows` installs the same N entries on a
            fresh bridge: the same switch doing the same work from OVS's own
            client, the ratio is what Railyard adds on top.

    make bench-southbound  ->  bench/results/southbound.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TypedDict

from bench import fanout, ofctl, write_result
from controller.fabric import NicId, load_fabric
from controller.intent.model import FlowMatch, FlowPin, RecordKind, pin_to_doc
from controller.intent.store import Change, SqliteIntentStore
from controller.southbound.overlay import pin_entries
from emulation.net import ovs
from emulation.processes.controller_process import ControllerProcess, Ports, total

LEAF = "ryl0r0"
BRIDGE = "rybench0"
SRC, DST = NicId(0, 0, 0), NicId(0, 1, 0)


class _Round(TypedDict):
    install: dict[str, float]  # connect_reconcile's figures
    steady: dict[str, float]
    baseline_ofctl_bundle_seconds: float


def bench_pins(count: int) -> list[FlowPin]:
    return [
        FlowPin(f"bench-{i:05d}", FlowMatch(SRC, DST, "udp", 10000 + i, 4791), "rys1", symmetric=False)
        for i in range(count)
    ]


def flow_count(bridge: str) -> int:
    return len(ovs.dump_flows(bridge))


def connect_reconcile(ctl: ControllerProcess) -> dict:
    samples = ctl.wait_ready(1, timeout_s=120, serving=False)  # one switch of six: never SERVING
    return {
        "seconds": total(samples, "railyard_reconcile_duration_seconds_sum", trigger="connect"),
        "commit_seconds": total(samples, "railyard_reconcile_phase_seconds_sum", phase="commit"),
        "plan_seconds": total(samples, "railyard_reconcile_phase_seconds_sum", phase="plan"),
        "dump_seconds": total(samples, "railyard_reconcile_phase_seconds_sum", phase="dump"),
        "flow_mods": total(samples, "railyard_flow_mods_total"),
        "bundles": total(samples, "railyard_bundle_commits_total", result="ok"),
    }


def run(entries: int, repeats: int) -> dict:
    fabric = load_fabric()
    dpid = fabric.switch(LEAF).dpid
    pins = bench_pins(entries)
    rounds: list[_Round] = []
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        workdir = Path(tmp)
        store = SqliteIntentStore(workdir / "intent.db")
        store.apply(Change(puts={(RecordKind.PIN, p.name): pin_to_doc(p) for p in pins}), 1)
        store.close()
        for r in range(repeats):
            ports = Ports.pick()
            ovs.delete_bridges([BRIDGE])
            ovs.add_bridge(BRIDGE, dpid, ports.controller_target, "bench")
            ctl = ControllerProcess(
                None, workdir / "intent.db", ports, workdir / "controller.log", reconcile_interval_s=3600
            )
            try:
                ctl.start()
                install = connect_reconcile(ctl)
                assert flow_count(BRIDGE) == entries, "not every entry was installed"
                ctl.kill()
                ctl.start()
                steady = connect_reconcile(ctl)
                assert steady["flow_mods"] == 0 and flow_count(BRIDGE) == entries
            finally:
                ctl.kill()
                ovs.delete_bridges([BRIDGE])
            overlay = [e for pin in pins for e in pin_entries(fabric, pin)]
            baseline = ofctl.bundle_install_seconds(overlay, dpid + 1, workdir)
            rounds.append({"install": install, "steady": steady, "baseline_ofctl_bundle_seconds": baseline})
            print(
                f"round {r + 1}: install {install['seconds']:.3f} s ({entries / install['seconds']:.0f} flow-mods/s), "
                f"steady reconcile {steady['seconds'] * 1e3:.1f} ms, ovs-ofctl --bundle {baseline:.3f} s",
                flush=True,
            )

    install_s = statistics.median(r["install"]["seconds"] for r in rounds)
    steady_s = statistics.median(r["steady"]["seconds"] for r in rounds)
    baseline_s = statistics.median(r["baseline_ofctl_bundle_seconds"] for r in rounds)
    return {
        "benchmark": "southbound",
        "host": platform.node(),
        "entries": entries,
        "repeats": repeats,
        "rounds": rounds,
        "summary": {
            "install_seconds_median": install_s,
            "install_flow_mods_per_second": entries / install_s,
            "steady_reconcile_seconds_median": steady_s,
            "steady_flow_mods": max(r["steady"]["flow_mods"] for r in rounds),
            "baseline_ofctl_bundle_seconds_median": baseline_s,
            "baseline_flow_mods_per_second": entries / baseline_s,
            "install_time_vs_ofctl_ratio": install_s / baseline_s,
        },
    }


def stats_poll_case(bridges: int, repeats: int) -> dict:
    """bench.stats_poll in a process of its own (os-ken starts once per process)."""
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        out = Path(tmp) / "stats-poll.json"
        subprocess.run(
            [sys.executable, "-m", "bench.stats_poll", "--bridges", str(bridges), "--repeats", str(repeats),
             "--out", str(out)],
            check=True,
        )  # fmt: skip
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--fan-out",
        default="64,128",
        help="bridge counts of the fan-out case (default 64,128; '' skips it)",
    )
    parser.add_argument("--fan-out-entries", type=int, default=512, help="overlay entries per bridge (default 512)")
    parser.add_argument("--fan-out-changed", type=int, default=32, help="entries a TE cycle changes per bridge")
    parser.add_argument(
        "--stats-poll-bridges",
        type=int,
        default=32,
        help="bridges of the OpenFlow-statistics case, standing in for ft2-16k's switches (0 skips it)",
    )
    parser.add_argument("--out", default="bench/results/southbound.json")
    args = parser.parse_args()
    ovs.check_running()
    result = run(args.entries, args.repeats)
    if args.stats_poll_bridges:
        result["stats_poll"] = stats_poll_case(args.stats_poll_bridges, args.repeats)
        result["summary"]["stats_poll"] = result["stats_poll"]["summary"]
    if args.fan_out:
        with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
            counts = [int(c) for c in args.fan_out.split(",")]
            result["fan_out"] = fanout.run(
                counts, args.fan_out_entries, args.fan_out_changed, args.repeats, Path(tmp), Ports.pick().openflow
            )
        for count, case in result["fan_out"]["cases"].items():
            result["summary"][f"fan_out_{count}"] = case["summary"]
    out = write_result(args.out, result)
    print(json.dumps(result["summary"], indent=2))
    print(f"wrote {out}", flush=True)
    if args.fan_out:
        # os-ken's listener and connection threads cannot be stopped (the
        # native hub has no kill), and they are not daemon threads.
        os._exit(0)


if __name__ == "__main__":
    main()
