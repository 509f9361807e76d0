"""A caller over its telemetry budget, as hard as it can: does placement notice?

The real daemon (ft2-16k.yaml, TE on, no switches) with its default
budget. Three phases of `--seconds` (60) each, PlaceJob and ReleaseJob
five times a second throughout (the mutation limit lifted):
- before: placement alone;
- flood: one caller at `--over` (2) times its budget, split over 8 streams,
  each reopened at once whenever the daemon ends it (pushback ignored);
- after: placement alone again, so the noise between the two quiet phases
  is measured in the same run.

Accepted is railyard_telemetry_records_total{result="accepted"} over the
flood, per second, against the budget; PlaceJob p99 is the nearest-rank
percentile of the client's timings in each phase.

    make bench-budget  ->  bench/results/budget.json
    (targets: accepted <= 1.1 x budget; PlaceJob p99 in the flood within the
    quiet phases' noise)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

from bench import write_result
from bench.soak import SPEC, Placer, Sender, place_figures
from controller.api.limits import TELEMETRY_RECORDS_PER_S
from emulation.processes.controller_process import ControllerProcess, Ports, total

STREAMS = 8


def phase(placer: Placer, seconds: float) -> list[float]:
    start = len(placer.timings)
    time.sleep(seconds)
    return [t for _, t in placer.timings[start:]]


def run(args, tmp: Path) -> dict:
    ctl = ControllerProcess(
        args.spec, tmp / "intent.db", Ports.pick(), tmp / "controller.log", 10.0,
        extra_args=("--mutations-per-second", "100000"),
    ).start()  # fmt: skip
    stop = threading.Event()
    try:
        ctl.wait_serving_api(120)
        placer = Placer(ctl, args.seed, stop, per_s=5.0)
        placer.start()
        time.sleep(5)  # warm
        before = phase(placer, args.seconds)
        per_stream = args.over * TELEMETRY_RECORDS_PER_S / STREAMS
        accepted_before = total(ctl.metrics(), "railyard_telemetry_records_total", result="accepted")
        sender = Sender(
            args.spec, f"127.0.0.1:{ctl.ports.grpc}", [per_stream] * STREAMS, 1000, 0.05, args.seed, polite=False
        ).start()
        time.sleep(3)  # the child process imports and builds its flows
        flood_started = time.monotonic()
        flood = phase(placer, args.seconds)
        accepted = total(ctl.metrics(), "railyard_telemetry_records_total", result="accepted") - accepted_before
        flood_s = time.monotonic() - flood_started
        tally = sender.stop()
        time.sleep(3)  # the flood's last batches drain
        after = phase(placer, args.seconds)
        stop.set()
        placer.join(timeout=10)
    finally:
        stop.set()
        ctl.stop()
    quiet = [place_figures(before), place_figures(after)]
    noise = abs(quiet[0]["p99_ms"] - quiet[1]["p99_ms"])
    during = place_figures(flood)
    sent = tally["sent"]
    return {
        "budget_records_per_s": TELEMETRY_RECORDS_PER_S,
        "offered_records_per_s": sent / flood_s,
        "accepted_records_per_s": accepted / flood_s,
        "accepted_over_budget": accepted / flood_s / TELEMETRY_RECORDS_PER_S,
        "streams_cut": sum(tally["cut"].values()),
        "streams_opened_per_s": (sum(tally["cut"].values()) + STREAMS) / flood_s,
        "place_job_before": quiet[0],
        "place_job_flood": during,
        "place_job_after": quiet[1],
        "quiet_p99_noise_ms": noise,
        "flood_p99_within_noise": during["p99_ms"] <= max(q["p99_ms"] for q in quiet) + noise,
        "placement_errors": dict(placer.errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--over", type=float, default=2.0, help="what the caller offers, in budgets")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench/results/budget.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="railyard-budget-") as tmp:
        result = {
            "benchmark": "budget",
            "host": platform.node(),
            "load_average_at_start": os.getloadavg(),
            "spec": args.spec.name,
            **run(args, Path(tmp)),
            "load_average_at_end": os.getloadavg(),
        }
    print(json.dumps(result, indent=1))
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
