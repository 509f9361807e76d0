"""Fabric model at scale: build, warm, path lookups and the controller's memory.

For the 2,048-GPU spec (rail-2k.yaml) and the 16,384-GPU FT2 spec
(ft2-16k.yaml), each measured in a fresh process so the memory figures are
the fabric's own:

- build_s, warm_s: `build_fabric(spec)` and `fabric.warm()`, what the daemon
  pays at start; rss_mib (VmRSS) after both, and the peak (VmHWM);
- egress_path: N seeded random same-rail cross-pod (src, dst, via) calls,
  timed in a loop: calls per second and ns per call;
- controller: the real daemon (`railyard controller run --spec`, no switches
  attached) until it answers GetFabric, then a 1,024-GPU ring and an
  8-GPU all-to-all over PlaceJob (the first placements: no one-time cost may
  hide there), then its VmRSS and VmHWM.

    make bench-fabric  ->  bench/results/fabric.json
    (targets at 16K: build + warm <= 5 s; controller RSS <= 2 GiB)
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import write_result
from controller.fabric import NicId, build_fabric, load_spec
from controller.fabric.spec import SPECS_DIR

SPECS = (SPECS_DIR / "rail-2k.yaml", SPECS_DIR / "ft2-16k.yaml")
FIRST_JOBS = ((1024, "ring"), (8, "all-to-all"), (64, "tree"))


def _status_mib(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def measure_model(spec_path: Path, calls: int, seed: int) -> dict:
    """Runs in its own process (see main)."""
    spec = load_spec(spec_path)
    rss_start = _status_mib()["VmRSS"]
    started = time.perf_counter()
    fabric = build_fabric(spec)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    fabric.warm()
    warm_s = time.perf_counter() - started
    memory = _status_mib()

    rng = random.Random(seed)
    stream = []
    for _ in range(calls):
        rail, pod = rng.randrange(spec.rails), rng.randrange(spec.pods)
        other = rng.randrange(spec.pods - 1)
        other += other >= pod
        src = NicId(rail, pod, rng.randrange(spec.servers_per_pod))
        dst = NicId(rail, other, rng.randrange(spec.servers_per_pod))
        vias = fabric.vias(src, dst)
        stream.append((src, dst, vias[rng.randrange(len(vias))]))
    egress_path = fabric.egress_path
    started = time.perf_counter()
    for src, dst, via in stream:
        egress_path(src, dst, via)
    elapsed = time.perf_counter() - started
    return {
        "gpus": fabric.gpu_count,
        "switches": len(fabric.switches),
        "links": len(fabric.links),
        "build_s": build_s,
        "warm_s": warm_s,
        "build_plus_warm_s": build_s + warm_s,
        "rss_at_start_mib": rss_start,
        "rss_after_warm_mib": memory["VmRSS"],
        "peak_rss_after_warm_mib": memory["VmHWM"],
        "egress_path": {
            "calls": calls,
            "kind": "random same-rail cross-pod (src, dst, via)",
            "seconds": elapsed,
            "calls_per_s": calls / elapsed,
            "ns_per_call": elapsed / calls * 1e9,
            "peak_rss_mib": _status_mib()["VmHWM"],  # includes the stream of calls itself
        },
    }


def measure_controller(spec_path: Path, workdir: Path, timeout_s: float) -> dict:
    # Imported here: the model's own process should not carry gRPC's memory.

    from emulation.processes.controller_process import ControllerProcess, Ports

    ctl = ControllerProcess(spec_path, workdir / "intent.db", Ports.pick(), workdir / "controller.log", 10.0)
    started = time.perf_counter()
    ctl.start()
    assert ctl.proc is not None
    try:
        ctl.wait_serving_api(timeout_s)
        serving_s = time.perf_counter() - started
        at_serving = _status_mib(ctl.proc.pid)
        first = []
        with ctl.client() as client:
            for i, (size, pattern) in enumerate(FIRST_JOBS):
                started = time.perf_counter()
                client.place_job(f"first-{i}", size, pattern, 50.0)
                first.append({"gpus": size, "pattern": pattern, "ms": (time.perf_counter() - started) * 1e3})
        after = _status_mib(ctl.proc.pid)
    finally:
        ctl.stop()
    return {
        "seconds_to_serve": serving_s,
        "rss_serving_mib": at_serving["VmRSS"],
        "first_place_job": first,
        "rss_after_first_jobs_mib": after["VmRSS"],
        "peak_rss_mib": after["VmHWM"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000, help="egress_path calls per spec")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spec", type=Path, action="append", help="a spec (repeatable; default: 2K and 16K)")
    parser.add_argument("--skip-controller", action="store_true", help="model only, no daemon")
    parser.add_argument("--controller-timeout", type=float, default=300.0)
    parser.add_argument("--model-only", type=Path, help=argparse.SUPPRESS)  # the child process's mode
    parser.add_argument("--out", default="bench/results/fabric.json")
    args = parser.parse_args()

    if args.model_only:
        print(json.dumps(measure_model(args.model_only, args.calls, args.seed)))
        return

    result: dict = {"benchmark": "fabric", "host": platform.node(), "seed": args.seed, "specs": {}}
    for spec_path in args.spec or SPECS:
        child = [sys.executable, "-m", "bench.fabric", "--model-only", str(spec_path), "--calls", str(args.calls)]
        reply = subprocess.run([*child, "--seed", str(args.seed)], check=True, capture_output=True, text=True)
        entry = {"model": json.loads(reply.stdout)}
        if not args.skip_controller:
            with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
                entry["controller"] = measure_controller(spec_path, Path(tmp), args.controller_timeout)
        result["specs"][spec_path.name] = entry
        print(spec_path.name, json.dumps(entry, indent=2), flush=True)
    out = write_result(args.out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
