"""The daemon under a steady load for a long time: does it stay fast and flat?

The real daemon (ft2-16k.yaml, 16,384 GPUs, a SQLite store, TE on, no
switches attached) takes, for `--minutes` (20):
- telemetry at `--records-per-s` (20,000) over `--streams` (4) streams from
  one caller: flow records with churn (`--churn` of the flows end each
  second and new ones, new 5-tuples between new NIC pairs, take their
  place; one in twenty an elephant), and leaf uplink hop records;
- one PlaceJob and one ReleaseJob every second (8 to 64 GPUs).

First a minute of placements alone: the baseline in the same run. Measured:
the daemon's RSS every 10 s and its slope after the first 2 minutes (least
squares, MiB/min), threads and fds, each cache's gauge (the TE engine's,
railyard_te_cache_*, and WatchJobs' history, railyard_watch_history),
malloc's bytes in use and free (railyard_heap_bytes: what RSS is made of),
PlaceJob p50/p99 per minute and over the soak (nearest-rank percentiles of
the client's timings), TE cycle p50/p99 from railyard_te_cycle_seconds (its
buckets, as Prometheus' histogram_quantile reads them), the store's commit
p50/p99 and the samples in which a commit (its fsync) took over 50 ms, from
railyard_store_request_seconds{op="commit"}, telemetry accepted,
and every error: failed calls, cut streams, records rejected or dropped, and
railyard_errors_total.

    make bench-soak  ->  bench/results/soak.json
    (targets: RSS slope <= 1 MiB/min after 2 min, cache gauges flat, PlaceJob
    p99 <= 50 ms in every minute, 0 errors)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc

from bench import write_result
from bench.child import Child
from bench.telemetry_streams import Sender
from controller.api.client import Client
from controller.fabric.spec import SPECS_DIR
from emulation.model.stats import percentile
from emulation.processes.controller_process import ControllerProcess, Ports, Samples, total

SPEC = SPECS_DIR / "ft2-16k.yaml"
SIZES = (8, 16, 32, 64)
SLOW_COMMIT_S = 0.05  # a bucket edge of railyard_store_request_seconds


def histogram_quantile(buckets: dict[float, float], q: float) -> float:
    """As Prometheus' histogram_quantile: linear within the bucket the rank falls in."""
    edges = sorted(buckets)
    count = buckets[edges[-1]] if edges else 0.0
    if not count:
        return float("nan")
    rank, lower, below = q * count, 0.0, 0.0
    for edge in edges:
        if buckets[edge] >= rank:
            if math.isinf(edge):
                return lower
            return lower + (edge - lower) * (rank - below) / max(buckets[edge] - below, 1e-12)
        lower, below = edge, buckets[edge]
    return lower


def buckets_of(samples: Samples, name: str, **wanted: str) -> dict[float, float]:
    """A histogram's buckets, of the series with the `wanted` labels."""
    return {
        float(labels["le"]): value
        for (metric, pairs), value in samples.items()
        if metric == f"{name}_bucket" and wanted.items() <= (labels := dict(pairs)).items()
    }


def since(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    """What a histogram's buckets counted between two scrapes."""
    return {le: after.get(le, 0) - v for le, v in before.items()}


def _place(target: str, seed: int, per_s: float, stop, out) -> None:
    """In a process of its own: `per_s` PlaceJob and ReleaseJob calls a
    second until `stop`; then every PlaceJob's (monotonic, seconds) and the
    errors on `out`."""
    rng, timings, placed = random.Random(seed), [], []
    errors: Counter[str] = Counter()
    with Client(target) as client:
        next_at, serial = time.monotonic(), 0
        while not stop.is_set():
            serial += 1
            started = time.perf_counter()
            try:
                client.place_job(f"soak-{serial}", rng.choice(SIZES), "ring", 50.0)
                placed.append(f"soak-{serial}")
            except grpc.RpcError as exc:
                errors[f"PlaceJob {exc.code().name}"] += 1
            timings.append((time.monotonic(), time.perf_counter() - started))
            if len(placed) > 20:
                try:
                    client.release_job(placed.pop(rng.randrange(len(placed))))
                except grpc.RpcError as exc:
                    errors[f"ReleaseJob {exc.code().name}"] += 1
            next_at += 1 / per_s
            stop.wait(max(0.0, next_at - time.monotonic()))
    out.put((timings, dict(errors)))


class Placer:
    """The timed placement client, in a child process: in the bench's own
    process each metrics scrape (parsing a 16K-GPU fabric's exposition)
    held the interpreter lock for a PlaceJob's whole budget, and the
    timing showed the bench, not the daemon. CLOCK_MONOTONIC is the same
    in both processes, so a call's time says which phase it fell in."""

    def __init__(self, target: str, seed: int, per_s: float = 1.0) -> None:
        self._child = Child(_place, target, seed, per_s)
        self.timings: list[tuple[float, float]] = []
        self.errors: dict[str, int] = {}

    def start(self) -> Placer:
        self._child.start()
        return self

    def stop(self) -> None:
        self.timings, self.errors = self._child.stop()


def process_figures(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "cpu_s": (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"),
    }


CACHES = ("railyard_te_cache", "railyard_watch_history")


def cache_gauges(samples: Samples) -> dict[str, float]:
    """Each cache's gauge by name and labels (`railyard_te_cache_entries{cache=routes}`)."""
    return {
        name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels)) + "}" if labels else ""): value
        for (name, labels), value in samples.items()
        if name.startswith(CACHES)
    }


def heap_mib(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["state"]: value / 2**20
        for (name, labels), value in samples.items()
        if name == "railyard_heap_bytes"
    }


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per minute."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var if var else float("nan")


def place_figures(timings: list[float]) -> dict:
    ms = [t * 1000 for t in timings]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 0.5),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms, default=0),
    }


def commit_buckets(samples: Samples) -> dict[float, float]:
    """The SQLite store's commits (its fsync included) so far, as histogram buckets."""
    return buckets_of(samples, "railyard_store_request_seconds", op="commit")


def commits_over(samples: Samples, seconds: float) -> float:
    buckets = commit_buckets(samples)
    return buckets.get(math.inf, 0.0) - buckets.get(seconds, 0.0)


def soak(args, workdir: Path) -> dict:
    ctl = ControllerProcess(args.spec, workdir / "intent.db", Ports.pick(), workdir / "controller.log", 10.0).start()
    try:
        ctl.wait_serving_api(120.0)
        assert ctl.proc is not None
        pid = ctl.proc.pid
        placer = Placer(f"127.0.0.1:{ctl.ports.grpc}", args.seed).start()
        time.sleep(args.baseline_s)
        before = ctl.metrics()
        sender = Sender(
            args.spec, f"127.0.0.1:{ctl.ports.grpc}", [args.records_per_s / args.streams] * args.streams,
            args.flows, args.churn, args.seed,
        ).start()  # fmt: skip
        soak_started = time.monotonic()
        series = []
        while time.monotonic() - soak_started < args.minutes * 60:
            time.sleep(10)
            samples = ctl.metrics()
            point = {"t_s": round(time.monotonic() - soak_started, 1), **process_figures(pid)}
            point["caches"] = cache_gauges(samples)
            point["heap_mib"] = heap_mib(samples)
            point["accepted_total"] = total(samples, "railyard_telemetry_records_total", result="accepted")
            # A placement waits for its commit's fsync: the disk's tail is the API's.
            point["commits_over_50ms"] = commits_over(samples, SLOW_COMMIT_S)
            series.append(point)
            print(json.dumps(point), flush=True)
        after = ctl.metrics()
        tally = sender.stop()
        placer.stop()
        errors_log = [line for line in (workdir / "controller.log").read_text().splitlines() if " ERROR " in line]
    finally:
        ctl.stop()
    baseline = [t for at, t in placer.timings if at < soak_started]
    return figures(args, baseline, placer, soak_started, series, before, after, tally, errors_log)


def figures(args, baseline, placer, soak_started, series, before, after, tally, errors_log) -> dict:
    during = [(at - soak_started, t) for at, t in placer.timings if at >= soak_started]
    per_minute = [
        place_figures([t for at, t in during if minute * 60 <= at < (minute + 1) * 60])
        for minute in range(args.minutes)
    ]
    late = [p for p in series if p["t_s"] >= 120]  # after the first 2 minutes
    cycle = since(buckets_of(after, "railyard_te_cycle_seconds"), buckets_of(before, "railyard_te_cycle_seconds"))
    commits = since(commit_buckets(after), commit_buckets(before))
    slow_before = commits_over(before, SLOW_COMMIT_S)
    slow = [0.0] + [p["commits_over_50ms"] - slow_before for p in series]
    caches = sorted({name for p in series for name in p["caches"]})
    elapsed = series[-1]["t_s"] if series else 0.0
    accepted = total(after, "railyard_telemetry_records_total", result="accepted") - total(
        before, "railyard_telemetry_records_total", result="accepted"
    )
    cut: Counter[str] = Counter(tally["cut"])
    errors: dict = {
        "client": dict(placer.errors),
        "streams_cut": dict(cut),
        "records_rejected": total(after, "railyard_telemetry_records_total", result="rejected")
        - total(before, "railyard_telemetry_records_total", result="rejected"),
        "records_dropped": total(after, "railyard_telemetry_records_total", result="dropped")
        - total(before, "railyard_telemetry_records_total", result="dropped"),
        "railyard_errors_total": total(after, "railyard_errors_total") - total(before, "railyard_errors_total"),
        "log_error_lines": len(errors_log),
    }
    errors["count"] = (
        sum(placer.errors.values()) + sum(cut.values()) + errors["records_rejected"]
        + errors["records_dropped"] + errors["railyard_errors_total"] + errors["log_error_lines"]
    )  # fmt: skip
    cpu = (series[-1]["cpu_s"] - series[0]["cpu_s"]) / max(series[-1]["t_s"] - series[0]["t_s"], 1) if series else 0
    return {
        "minutes": args.minutes,
        "telemetry_records_per_s_sent": tally["sent"] / max(elapsed, 1),
        "telemetry_records_per_s_accepted": accepted / max(elapsed, 1),
        "place_job_baseline": place_figures(baseline),
        "place_job_soak": place_figures([t for _, t in during]),
        "place_job_per_minute": per_minute,
        "place_job_worst_minute_p99_ms": max((m["p99_ms"] for m in per_minute if m["count"]), default=float("nan")),
        "store_commit_p50_s": histogram_quantile(commits, 0.5),
        "store_commit_p99_s": histogram_quantile(commits, 0.99),
        # (end of the 10 s sample, commits in it): the samples in which a commit took over 50 ms.
        "store_commits_over_50ms": [(p["t_s"], round(b - a)) for p, a, b in zip(series, slow, slow[1:]) if b > a],
        "te_cycle_p50_s": histogram_quantile(cycle, 0.5),
        "te_cycle_p99_s": histogram_quantile(cycle, 0.99),
        "te_cycles": max(cycle.values(), default=0),
        "rss_mib_start": series[0]["rss_mib"] if series else None,
        "rss_mib_end": series[-1]["rss_mib"] if series else None,
        "rss_slope_mib_per_min_after_2_min": slope_per_min([(p["t_s"], p["rss_mib"]) for p in late]),
        "heap_slopes_mib_per_min_after_2_min": {
            state: slope_per_min([(p["t_s"], p["heap_mib"][state]) for p in late])
            for state in sorted({state for p in series for state in p["heap_mib"]})
        },
        "cache_slopes_per_min_after_2_min": {
            name: slope_per_min([(p["t_s"], p["caches"].get(name, 0)) for p in late]) for name in caches
        },
        "daemon_cpu_share_of_a_core": cpu,
        "errors": errors,
        "error_log_lines": errors_log[:20],
        "series": series,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--baseline-s", type=float, default=60.0)
    parser.add_argument("--records-per-s", type=float, default=20_000)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--flows", type=int, default=1500, help="active flows per stream")
    parser.add_argument("--churn", type=float, default=0.05, help="share of a stream's flows replaced each second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench/results/soak.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="railyard-soak-") as tmp:
        result = {
            "benchmark": "soak",
            "host": platform.node(),
            "load_average_at_start": os.getloadavg(),
            "spec": args.spec.name,
            **soak(args, Path(tmp)),
            "load_average_at_end": os.getloadavg(),
        }
    summary = {k: v for k, v in result.items() if k not in ("series", "place_job_per_minute", "error_log_lines")}
    print(json.dumps(summary, indent=1))
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
