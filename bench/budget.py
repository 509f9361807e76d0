"""A caller over its telemetry budget, as hard as it can: does placement notice?

The real daemon (ft2-16k.yaml, TE on, no switches) with its default
budget. Four phases of `--seconds` (60) each, PlaceJob and ReleaseJob five
times a second throughout (the mutation limit lifted):
- quiet: placement alone (for reference);
- at budget: one caller at its budget over 8 streams, each waiting
  out its pushback as told;
- flood: the same caller at `--over` (2) times its budget over 8 streams,
  each reopened at once whenever the daemon ends it (pushback ignored);
- at budget again: so the noise between the two phases the flood is
  compared with is measured in the same run.

Accepted is railyard_telemetry_records_total{result="accepted"} over the
flood, per second, against the budget; PlaceJob p99 is the nearest-rank
percentile of the client's timings in each phase. Telemetry comes from a
child process (bench.telemetry_streams.Sender).

    make bench-budget  ->  bench/results/budget.json
    (targets: accepted <= 1.1 x budget; PlaceJob p99 in the flood within the
    at-budget phases' noise)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from bench import write_result
from bench.soak import SPEC, Placer, place_figures
from bench.telemetry_streams import Sender
from controller.api.limits import TELEMETRY_RECORDS_PER_S
from emulation.processes.controller_process import ControllerProcess, Ports, total

STREAMS = 8


def phase(seconds: float) -> tuple[float, float]:
    """A phase's span on the monotonic clock (the placer's timings are read after it stops)."""
    started = time.monotonic()
    time.sleep(seconds)
    return started, time.monotonic()


def within(placer: Placer, span: tuple[float, float]) -> list[float]:
    return [t for at, t in placer.timings if span[0] <= at < span[1]]


def run(args, tmp: Path) -> dict:
    ctl = ControllerProcess(
        args.spec, tmp / "intent.db", Ports.pick(), tmp / "controller.log", 10.0,
        extra_args=("--mutations-per-second", "100000"),
    ).start()  # fmt: skip
    try:
        ctl.wait_serving_api(120)
        target = f"127.0.0.1:{ctl.ports.grpc}"
        placer = Placer(target, args.seed, per_s=5.0).start()
        time.sleep(5)  # warm
        quiet = phase(args.seconds)
        at_budget = [telemetry_phase(ctl, target, args, 1.0, polite=True)]
        flood = telemetry_phase(ctl, target, args, args.over, polite=False)
        at_budget.append(telemetry_phase(ctl, target, args, 1.0, polite=True))
        placer.stop()
    finally:
        ctl.stop()
    steady = [place_figures(within(placer, p["span"])) for p in at_budget]
    noise = abs(steady[0]["p99_ms"] - steady[1]["p99_ms"])
    during = place_figures(within(placer, flood["span"]))
    return {
        "budget_records_per_s": TELEMETRY_RECORDS_PER_S,
        "offered_records_per_s": flood["offered"],
        "accepted_records_per_s": flood["accepted"],
        "accepted_over_budget": flood["accepted"] / TELEMETRY_RECORDS_PER_S,
        "streams_cut": flood["cut"],
        "streams_opened_per_s": flood["opened_per_s"],
        "at_budget_accepted_records_per_s": [p["accepted"] for p in at_budget],
        "place_job_quiet": place_figures(within(placer, quiet)),
        "place_job_at_budget": steady[0],
        "place_job_flood": during,
        "place_job_at_budget_again": steady[1],
        "at_budget_p99_noise_ms": noise,
        "flood_p99_within_noise": during["p99_ms"] <= max(p["p99_ms"] for p in steady) + noise,
        "placement_errors": dict(placer.errors),
    }


def telemetry_phase(ctl, target: str, args, budgets: float, polite: bool) -> dict:
    """`budgets` times the budget over STREAMS streams for a phase: what was
    offered and accepted per second, the streams cut, and the phase's span."""
    sender = Sender(
        args.spec, target, [budgets * TELEMETRY_RECORDS_PER_S / STREAMS] * STREAMS, 1000, 0.05, args.seed, polite
    ).start()
    time.sleep(3)  # the child process imports and builds its flows
    accepted_before = total(ctl.metrics(), "railyard_telemetry_records_total", result="accepted")
    started = time.monotonic()
    span = phase(args.seconds)
    accepted = total(ctl.metrics(), "railyard_telemetry_records_total", result="accepted") - accepted_before
    seconds = time.monotonic() - started
    tally = sender.stop()
    time.sleep(3)  # its last batches drain
    cut = sum(tally["cut"].values())
    return {
        "span": span,
        "offered": tally["sent"] / (seconds + 3),
        "accepted": accepted / seconds,
        "cut": cut,
        "opened_per_s": (cut + STREAMS) / (seconds + 3),
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
