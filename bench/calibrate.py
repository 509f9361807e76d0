"""Calibration: how much traffic the emulation carries faithfully on this machine.

For each emulated NIC rate and path length, run N concurrent TCP elephants that
the underlay's hash spreads over distinct uplinks (so the shaped ideal is
exactly N x rate), and report aggregate goodput as a ratio of that ideal.
The OVS userspace datapath forwards every packet through one thread, so the
envelope is in packet-hops per second; the demo spec's NIC rate is chosen so
its full elephant permutation stays inside it.

    make bench-calibrate   ->  bench/results/calibration.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

from bench import write_result
from controller.fabric import DEFAULT_SPEC, NicId, build_fabric, load_spec
from emulation.model.pairs import permutation_pairs
from emulation.net.fabric import EmulatedFabric
from emulation.traffic.probes import run_elephants, steer_by_source_port

FIDELITY_TARGET = 0.95


def vswitchd_cpu_seconds() -> float:
    """CPU time ovs-vswitchd has used so far: its forwarding thread is the bottleneck."""
    pid = int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_hop_pairs(fabric):
    """Same leaf: server s -> server s+1 of the same pod and rail."""
    n = fabric.spec.servers_per_pod
    return [(nic, NicId(nic.rail, nic.pod, (nic.server + 1) % n)) for nic in fabric.nics if n > 1]


def measure(spec, rate_mbps: float, flow_counts: list[int], duration: float) -> list[dict]:
    spec = dataclasses.replace(spec, rates=dataclasses.replace(spec.rates, emulated_nic_mbps=rate_mbps))
    fabric = build_fabric(spec)
    rows = []
    mtu = spec.emulation.mtu
    with EmulatedFabric(fabric) as emu:
        for hops, pairs in ((1, one_hop_pairs(fabric)), (3, permutation_pairs(fabric))):
            for n in flow_counts:
                if n > len(pairs):
                    continue
                # spread across rails/pods first, so n flows load n distinct NICs
                chosen = sorted(pairs, key=lambda p: (p[0].server, p[0].pod, p[0].rail))[:n]
                flows = steer_by_source_port(emu, chosen, seed=n)
                cpu_before, t_before = vswitchd_cpu_seconds(), time.monotonic()
                run = run_elephants(emu, flows, duration)
                cpu = (vswitchd_cpu_seconds() - cpu_before) / (time.monotonic() - t_before)
                ideal = n * rate_mbps * 1e6
                rows.append(
                    {
                        "rate_mbps": rate_mbps,
                        "hops": hops,
                        "flows": n,
                        "aggregate_mbps": round(run.aggregate_bps / 1e6, 2),
                        "ideal_mbps": n * rate_mbps,
                        "fidelity": round(run.aggregate_bps / ideal, 4),
                        "min_flow_fraction": round(min(r.goodput_bps for r in run.results) / (rate_mbps * 1e6), 4),
                        "offered_packet_hops_per_s": round(ideal / (8 * mtu) * hops),
                        "vswitchd_cpu_ratio": round(cpu, 3),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(DEFAULT_SPEC))
    parser.add_argument("--rates", default="20,30,40,50", help="emulated NIC rates, Mb/s")
    parser.add_argument("--flows", default="1,2,4,8")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--out", default="bench/results/calibration.json")
    args = parser.parse_args()
    spec = load_spec(args.spec)
    started = time.time()
    rows = []
    for rate in [float(r) for r in args.rates.split(",")]:
        rows += measure(spec, rate, [int(n) for n in args.flows.split(",")], args.duration)
    faithful = [r for r in rows if r["fidelity"] >= FIDELITY_TARGET]
    envelope = max((r["offered_packet_hops_per_s"] for r in faithful), default=0)
    result = {
        "benchmark": "calibration",
        "spec": spec.name,
        "mtu": spec.emulation.mtu,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "started_unix": started,
        "fidelity_target": FIDELITY_TARGET,
        "envelope_packet_hops_per_s": envelope,
        "rows": rows,
    }
    out = write_result(args.out, result)
    print(f"envelope: {envelope} packet-hops/s at >= {FIDELITY_TARGET:.0%} fidelity; wrote {out}")


if __name__ == "__main__":
    main()
