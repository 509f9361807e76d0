"""Followers under a steady stream of mutations: how far behind, at what cost.

Three replicas of the real daemon on a three-member etcd (loopback,
Debian's etcd-server), `--spec` (default.yaml). Client threads place and
release jobs of `--gpus` (1) through the leader at `--rate` (150) mutations
a second for `--seconds` (60): the rate is the point here, so the jobs are
small (a placement on rail-2k costs the leader some 8 ms of CPU, and one
core does not carry 150 of those a second). Every replica streams WatchJobs
to the bench: a follower's lag for an event is when it arrived from that
follower minus when it arrived from the leader (same clock, same process).
CPU is each daemon's user+system time over the run (/proc). At the end the
leader is killed (-9) and the time to a new leader is measured, with
whether that one had to read the whole store first.

    make bench-replicas  ->  bench/results/replicas.json
    (targets: follower lag p99 <= 1 s; follower CPU <= 25% of the leader's)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc

from bench import write_result
from bench.soak import process_figures
from controller.api.client import Client
from controller.fabric.spec import SPECS_DIR
from emulation.model.stats import percentile
from emulation.processes.controller_process import ControllerProcess, Ports, total
from emulation.processes.etcd_local import LocalEtcd

SPEC = SPECS_DIR / "default.yaml"
CLIENTS = 10


class Watcher(threading.Thread):
    """One replica's WatchJobs: when each (revision, job, kind) arrived."""

    def __init__(self, target: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.target, self.stop = target, stop
        self.arrived: dict[tuple[int, str, int], float] = {}

    def run(self) -> None:
        with Client(self.target) as client:
            while not self.stop.is_set():
                try:
                    for event in client.watch_jobs(timeout_s=3600):
                        self.arrived.setdefault((event.intent_revision, event.job.job_id, event.kind), time.monotonic())
                        if self.stop.is_set():
                            return
                except grpc.RpcError:
                    self.stop.wait(0.2)


class Mutator(threading.Thread):
    """Places a job and releases it again, `rate` calls a second, through the replicas."""

    def __init__(self, targets: str, rate: float, gpus: int, name: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.targets, self.rate, self.gpus, self.prefix, self.stop = targets, rate, gpus, name, stop
        self.done = 0
        self.errors: Counter[str] = Counter()

    def run(self) -> None:
        serial = 0
        live: list[str] = []
        with Client(self.targets) as client:
            next_at = time.monotonic()
            while not self.stop.is_set():
                try:
                    if not live:  # place one, release it: each client holds a job at most
                        serial += 1
                        client.place_job(f"{self.prefix}-{serial}", self.gpus, "ring", 10.0)
                        live.append(f"{self.prefix}-{serial}")
                    else:
                        client.release_job(live.pop())
                    self.done += 1
                except grpc.RpcError as exc:
                    self.errors[exc.code().name] += 1
                next_at += 1 / self.rate
                self.stop.wait(max(0.0, next_at - time.monotonic()))


def leader_of(procs: list[ControllerProcess]) -> int | None:
    for i, proc in enumerate(procs):
        try:
            if total(proc.metrics(), "railyard_leader") == 1:
                return i
        except OSError:
            pass
    return None


def run(args, tmp: Path) -> dict:
    with LocalEtcd(members=3, workdir=tmp / "etcd") as etcd:
        ports = [Ports.pick() for _ in range(3)]
        procs = [
            ControllerProcess(
                args.spec, tmp / f"unused-{i}.db", p, tmp / f"replica-{i}.log", 10.0,
                extra_args=("--store", etcd.store_url("bench"), "--advertise", f"127.0.0.1:{p.grpc}",
                            "--mutations-per-second", "100000"),
            )
            for i, p in enumerate(ports)
        ]  # fmt: skip
        for proc in procs:
            proc.start()
        try:
            for proc in procs:
                proc.wait_serving_api(120)
            deadline = time.monotonic() + 30
            while (leader := leader_of(procs)) is None:
                assert time.monotonic() < deadline, "no leader"
                time.sleep(0.1)
            return measure(args, procs, ports, leader, tmp)
        finally:
            for proc in procs:
                proc.stop()


def measure(args, procs, ports, leader: int, tmp: Path) -> dict:
    stop = threading.Event()
    watchers = [Watcher(f"127.0.0.1:{p.grpc}", stop) for p in ports]
    for watcher in watchers:
        watcher.start()
    time.sleep(1.0)
    targets = ",".join(f"127.0.0.1:{p.grpc}" for p in ports)
    mutators = [Mutator(targets, args.rate / CLIENTS, args.gpus, f"m{i}", stop) for i in range(CLIENTS)]
    cpu_before = [process_figures(proc.proc.pid)["cpu_s"] for proc in procs]
    started = time.monotonic()
    for mutator in mutators:
        mutator.start()
    time.sleep(args.seconds)
    stop.set()
    elapsed = time.monotonic() - started
    cpu = [process_figures(proc.proc.pid)["cpu_s"] - before for proc, before in zip(procs, cpu_before, strict=True)]
    for mutator in mutators:
        mutator.join(timeout=10)
    time.sleep(2.0)  # the followers' last events
    lags, missing = {}, {}
    led = watchers[leader].arrived
    for i, watcher in enumerate(watchers):
        if i == leader:
            continue
        seconds = [watcher.arrived[key] - at for key, at in led.items() if key in watcher.arrived]
        lags[f"replica-{i}"] = {
            "events": len(seconds),
            "p50_ms": percentile(seconds, 0.5) * 1000,
            "p99_ms": percentile(seconds, 0.99) * 1000,
            "max_ms": max(seconds, default=0) * 1000,
        }
        missing[f"replica-{i}"] = sum(1 for key in led if key not in watcher.arrived)
    done = sum(m.done for m in mutators)
    result = {
        "mutations": done,
        "mutations_per_s": done / elapsed,
        "errors": dict(sum((m.errors for m in mutators), Counter())),
        "leader_events": len(led),
        "follower_lag": lags,
        "follower_events_missing": missing,
        "follower_lag_p99_ms": max(v["p99_ms"] for v in lags.values()),
        "cpu_s": {f"replica-{i}" + (" (leader)" if i == leader else ""): c for i, c in enumerate(cpu)},
        "follower_cpu_over_leader": max(c for i, c in enumerate(cpu) if i != leader) / max(cpu[leader], 1e-9),
    }
    result["failover"] = failover(procs, leader, tmp)
    return result


def failover(procs, leader: int, tmp: Path) -> dict:
    """kill -9 of the leader: seconds to a new one, and how it took over."""
    killed = time.monotonic()
    procs[leader].kill()
    while (new := leader_of(procs)) is None or new == leader:
        assert time.monotonic() - killed < 30, "no new leader"
        time.sleep(0.02)
    elected_s = time.monotonic() - killed
    lines = [line for line in (tmp / f"replica-{new}.log").read_text().splitlines() if "replica: leading" in line]
    return {"new_leader_s": elected_s, "took_over": lines[-1].split("replica: ", 1)[1] if lines else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--rate", type=float, default=150.0, help="mutations per second, all clients together")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per job")
    parser.add_argument("--out", default="bench/results/replicas.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="railyard-replicas-") as tmp:
        result = {
            "benchmark": "replicas",
            "host": platform.node(),
            "load_average_at_start": os.getloadavg(),
            "spec": args.spec.name,
            "rate": args.rate,
            "gpus_per_job": args.gpus,
            **run(args, Path(tmp)),
            "load_average_at_end": os.getloadavg(),
        }
    print(json.dumps(result, indent=1))
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
