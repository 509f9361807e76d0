"""Fragmentation: how full a fabric gets before a job is refused although
enough GPUs are free.

A seeded stream of events on one fabric: with probability 0.3 the release of
a live job (a uniformly random one), otherwise the arrival of a 1, 2, 4, 8,
16 or 64-GPU job (uniform; sizes above the fabric's GPU count are left out;
ring or tree, 50 Gb/s per flow). Arrivals outpace releases, so the fabric
fills and then stays full, with a refused arrival simply dropped (as a
scheduler would queue it). Two rules run the same stream, each on its own
state:

- railyard: `place()` as the controller runs it (free rails chosen best fit,
            candidates scored by predicted peak, then GPUs left free);
- old:      the rule before it: a k-GPU job (k < rails) takes rails 0..k-1
            on each of its servers, the first servers in (pod, index) order
            with those rails free (`available_servers` with its default
            rails); full-server jobs take the first whole free servers.

The figure: the fraction of the fabric's GPUs allocated at the first refusal
of a request whose GPU count is at most the free GPU count ("fits by
count": refused by where the free GPUs are, not by how many there are). Also
reported: the first refusal of any kind, every fits-by-count refusal over the
run, and the mean allocation once the fabric is full.

Releases pick a live job by position (u * number live, u drawn once per
event), so both rules see identical events until one of them first refuses.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench import write_result
from controller.fabric import Fabric, NicId, load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.te.capacity import Usage, free_capacity
from controller.te.jobs import Gpu, Job, JobRequest, Pattern
from controller.te.load import LoadLedger
from controller.te.placement import FabricState, NoCapacity, available_servers, place

SIZES = (1, 2, 4, 8, 16, 64)
RELEASE_P = 0.3
SPECS = (SPECS_DIR / "default.yaml", SPECS_DIR / "ft2-16k.yaml")


@dataclass(frozen=True)
class Event:
    release_at: float | None  # a release: the live job at this fraction of the list; None: an arrival
    request: JobRequest | None


def stream(fabric: Fabric, events: int, seed: int, release_p: float = RELEASE_P) -> list[Event]:
    rng = random.Random(seed)
    sizes = [s for s in SIZES if s <= fabric.gpu_count]
    out = []
    for i in range(events):
        if rng.random() < release_p:
            out.append(Event(rng.random(), None))
        else:
            request = JobRequest(f"f{i:05d}", rng.choice(sizes), rng.choice([Pattern.RING, Pattern.TREE]), 50.0)
            out.append(Event(None, request))
    return out


def place_old(fabric: Fabric, state: FabricState, request: JobRequest, now: float) -> Job:
    """The rule before best fit: rails 0..k-1, first servers in (pod, index) order."""
    k, m = request.per_server(fabric.rails), request.server_count(fabric.rails)
    avail = available_servers(fabric, state, request)
    servers = [key for _, keys in sorted(avail.items()) for key in keys][:m]
    if len(servers) < m:
        raise NoCapacity(f"{request.gpu_count} GPUs: {len(servers)} of {m} servers with rails 0-{k - 1} free")
    gpus = tuple(Gpu(j * k + r, NicId(r, pod, idx)) for j, (pod, idx) in enumerate(sorted(servers)) for r in range(k))
    return Job(request, gpus, (), 0.0, now)


class Run:
    """One rule's state over the stream."""

    def __init__(self, fabric: Fabric, rule: str) -> None:
        self.fabric, self.rule = fabric, rule
        self.jobs: dict[str, Job] = {}
        self.usage = Usage()
        self.ledger = LoadLedger(fabric)
        self.allocated = 0
        self.first_refusal: dict | None = None
        self.first_count_refusal: dict | None = None
        self.count_refusals: list[float] = []
        self.full_at: int | None = None
        self.allocation_after_full: list[float] = []
        self.place_s: list[float] = []

    def fraction(self) -> float:
        return self.allocated / self.fabric.gpu_count

    def apply(self, index: int, event: Event) -> None:
        if event.request is None:
            if self.jobs:
                assert event.release_at is not None
                live = list(self.jobs)
                job = self.jobs.pop(live[int(event.release_at * len(live))])
                self.usage.remove(job)
                self.ledger.add(job, sign=-1.0)
                self.allocated -= len(job.gpus)
        else:
            self._arrive(index, event.request)
        if self.full_at is not None:
            self.allocation_after_full.append(self.fraction())

    def _arrive(self, index: int, request: JobRequest) -> None:
        state = FabricState(self.jobs, usage=self.usage, jobs_bps=self.ledger.bps, ledger=self.ledger)
        started = time.perf_counter()
        try:
            if self.rule == "railyard":
                job = place(self.fabric, state, request, float(index))
            else:
                job = place_old(self.fabric, state, request, float(index))
        except NoCapacity:
            self.place_s.append(time.perf_counter() - started)
            self._refused(index, request)
            return
        self.place_s.append(time.perf_counter() - started)
        self.jobs[job.job_id] = job
        self.usage.add(job)
        self.ledger.add(job)
        self.allocated += len(job.gpus)

    def _refused(self, index: int, request: JobRequest) -> None:
        free = self.fabric.gpu_count - self.allocated
        fits = request.gpu_count <= free
        if self.full_at is None:
            self.full_at = index  # from the first refusal on, the fabric counts as full
        record = {
            "event": index,
            "allocated_fraction": self.fraction(),
            "gpu_count": request.gpu_count,
            "free_gpus": free,
            "fits_by_count": fits,
        }
        if self.first_refusal is None:
            self.first_refusal = record
        if fits:
            self.count_refusals.append(self.fraction())
            if self.first_count_refusal is None:
                capacity = free_capacity(self.fabric, self.usage)
                record |= {
                    "whole_servers_free": capacity.whole_servers_free,
                    "partly_free_servers": capacity.partly_free_servers,
                }
                self.first_count_refusal = record

    def result(self) -> dict:
        after = self.allocation_after_full
        return {
            "first_refusal": self.first_refusal,
            "first_refusal_fitting_by_count": self.first_count_refusal,
            "refusals_fitting_by_count": len(self.count_refusals),
            "allocated_fraction_at_refusals_fitting_by_count": _spread(self.count_refusals),
            "mean_allocated_fraction_once_full": statistics.fmean(after) if after else None,
            "place_ms_mean": statistics.fmean(self.place_s) * 1e3 if self.place_s else None,
        }


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"min": ordered[0], "median": statistics.median(ordered), "max": ordered[-1]}


def events_for(fabric: Fabric, release_p: float) -> int:
    """Enough to fill the fabric (arrivals net of releases) and then as many again."""
    sizes = [s for s in SIZES if s <= fabric.gpu_count]
    net_per_event = (1 - 2 * release_p) * statistics.fmean(sizes)
    return max(100, int(2 * fabric.gpu_count / net_per_event))


def run_spec(spec: Path, seeds: list[int], events: int | None = None, release_p: float = RELEASE_P) -> dict:
    fabric = load_fabric(spec)
    fabric.warm()
    count = events or events_for(fabric, release_p)
    trials: dict[str, list[dict]] = {"railyard": [], "old": []}
    started = time.perf_counter()
    for seed in seeds:
        events_list = stream(fabric, count, seed, release_p)
        runs = [Run(fabric, rule) for rule in trials]
        for index, event in enumerate(events_list):
            for run in runs:
                run.apply(index, event)
        for run in runs:
            trials[run.rule].append({"seed": seed, **run.result()})
    out: dict = {
        "spec": spec.name,
        "gpus": fabric.gpu_count,
        "rails": fabric.rails,
        "sizes": [s for s in SIZES if s <= fabric.gpu_count],
        "release_probability": release_p,
        "events_per_seed": count,
        "seeds": seeds,
        "seconds": time.perf_counter() - started,
    }
    for rule, results in trials.items():
        out[rule] = _summary(results)
    return out


def _summary(results: list[dict]) -> dict:
    firsts = [r["first_refusal_fitting_by_count"] for r in results]
    fractions = [f["allocated_fraction"] for f in firsts if f is not None]
    summary: dict = {
        # A run without any such refusal counts as 1.0: nothing was refused while GPUs were free.
        "allocated_fraction_at_first_refusal_fitting_by_count": _spread(
            fractions + [1.0] * sum(1 for f in firsts if f is None)
        ),
        "runs_without_a_refusal_fitting_by_count": sum(1 for f in firsts if f is None),
        "runs_at_or_above_98_percent": sum(1 for f in firsts if f is None or f["allocated_fraction"] >= 0.98),
        "allocated_fraction_at_first_refusal": _spread(
            [r["first_refusal"]["allocated_fraction"] for r in results if r["first_refusal"]]
        ),
        "mean_allocated_fraction_once_full": _spread(
            [r["mean_allocated_fraction_once_full"] for r in results if r["mean_allocated_fraction_once_full"]]
        ),
    }
    if len(results) <= 5:
        summary["runs"] = results
    return summary


def run_all(specs: list[Path], seeds: int = 0, events: int = 0) -> list[dict]:
    """Each spec with releases (the figure) and arrivals only (no release, so a
    refusal fitting by count is the placement rule's doing alone)."""
    results = []
    for spec in specs:
        gpus = load_fabric(spec).gpu_count
        seed_list = list(range(1, 1 + (seeds or (200 if gpus < 1000 else 3))))
        result = run_spec(spec, seed_list, events or None)
        result["arrivals_only"] = run_spec(spec, seed_list, events or None, release_p=0.0)
        results.append(result)
    return results


def headline(results: list[dict]) -> list[dict]:
    """One line per spec, rule and stream: the figures the issue asks for."""
    rows = []
    for result in results:
        for stream_name, r in (("with releases", result), ("arrivals only", result["arrivals_only"])):
            for rule in ("railyard", "old"):
                s = r[rule]
                rows.append(
                    {
                        "spec": result["spec"],
                        "stream": stream_name,
                        "rule": rule,
                        "seeds": len(r["seeds"]),
                        "first_refusal_fitting_by_count_median": s[
                            "allocated_fraction_at_first_refusal_fitting_by_count"
                        ]["median"],
                        "min": s["allocated_fraction_at_first_refusal_fitting_by_count"]["min"],
                        "seeds_at_or_above_98%": s["runs_at_or_above_98_percent"],
                        "first_refusal_any_median": (s["allocated_fraction_at_first_refusal"] or {}).get("median"),
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", action="append", help="spec (repeatable; default: default.yaml, ft2-16k.yaml)")
    parser.add_argument("--seeds", type=int, default=0, help="seeds per spec (default: 200 below 1,000 GPUs, else 3)")
    parser.add_argument("--events", type=int, default=0, help="events per seed (default: fill twice over)")
    parser.add_argument("--out", default="bench/results/fragmentation.json")
    args = parser.parse_args()
    results = run_all([Path(s) for s in args.spec] if args.spec else list(SPECS), args.seeds, args.events)
    for row in headline(results):
        print(json.dumps(row))
    print(f"wrote {write_result(args.out, {'benchmark': 'fragmentation', 'specs': results})}")


if __name__ == "__main__":
    main()
