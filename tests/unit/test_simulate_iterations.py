"""The simulator judged by time: iterations and bursts on the fluid
timeline, arms against the optimum, an iteration cut off by the end, the
command on a training mix."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from controller.cli.main import main
from controller.fabric import NicId, load_fabric
from emulation.model.sharing import Sharing
from emulation.simulate.arms import run_static, unsteered
from emulation.simulate.conditions import conditions
from emulation.simulate.iterations import Bounds, OptimumBeaten, arm_figures
from emulation.simulate.jobbound import Cuts, JobBound, lp_time_s
from emulation.simulate.prepared import ecmp_routing, prepare, spray_routing
from emulation.simulate.routes import Network
from emulation.simulate.run import RESOLVE_S, simulate
from emulation.simulate.timeline import Iteration
from emulation.simulate.traffic import arm_of, build_arms
from emulation.workload import load_workload, parse_workload, spec_file
from emulation.workload.events import check_events
from emulation.workload.expand import Placed, expand
from emulation.workload.placers import railyard_placer
from tests.unit.test_simulate import DEMO, MID

NIC_BPS = 400e9
SHARING = Sharing.PROPORTIONAL
RING_ALONE = """
name: ring
duration_s: 3
traffic:
  - {job: ring, gpus: 4, collective: ring, message_bytes: 40GB, iterations: 3, compute_gap_s: 0.5}
"""
RING_ACROSS = RING_ALONE.replace("gpus: 4", "gpus: 8")


def run_arm(text, seed, placer, routing):
    """One baseline arm of a workload on the demo fabric: its timeline, in
    delivered bytes alone (what framing costs is test_framing.py's)."""
    workload = check_events(parse_workload(text), DEMO)
    arm = arm_of("test", expand(DEMO, workload, seed, placer))
    prep = prepare(Network(DEMO), arm, links_die=False, framed=False)
    timeline = run_static(prep, conditions(DEMO, workload.events), workload.duration_s, RESOLVE_S, routing, SHARING)
    return timeline, arm


def alternating(request):
    """Four servers ringed across the pods in turn: two ring flows leave every leaf."""
    servers = [(0, 0), (1, 0), (0, 1), (1, 1)]
    gpus = tuple(NicId(r, *key) for key in servers for r in range(2))
    flows = tuple((NicId(r, *servers[i]), NicId(r, *servers[(i + 1) % 4]), "", 0) for r in range(2) for i in range(4))
    return Placed(gpus, flows)


def test_a_ring_alone_iterates_at_the_nic_rate_with_its_compute_gap():
    timeline, arm = run_arm(RING_ALONE, 1, railyard_placer(DEMO), ecmp_routing)
    (job,) = arm.jobs
    assert job.flow_bytes == 30 * 10**9  # 2(n-1)/n x S/k = 2 x 3/4 x 40 GB / 2
    alone = job.flow_bytes * 8 / NIC_BPS  # 0.6 s
    iterations = timeline.iterations
    assert [it.index for it in iterations] == [0, 1, 2]
    for it in iterations:
        assert it.time_s == pytest.approx(alone, rel=1e-6)
    for before, after in itertools.pairwise(iterations):
        assert after.start_s == pytest.approx(before.end_s + 0.5)  # the compute gap, not part of the iteration


def test_an_ecmp_collision_doubles_an_iteration_that_spraying_keeps():
    alone = 35e9 * 8 / NIC_BPS  # 2 x 7/8 x 40 GB / 2 per flow: 0.7 s
    seen = set()
    for seed in range(1, 9):
        ecmp, _ = run_arm(RING_ACROSS, seed, alternating, ecmp_routing)
        spray, _ = run_arm(RING_ACROSS, seed, alternating, spray_routing)
        times = {round(it.time_s / alone, 6) for it in ecmp.iterations}
        assert len(times) == 1 and times <= {1.0, 2.0}  # two ring flows on one uplink halve each other
        seen |= times
        assert all(it.time_s == pytest.approx(alone, rel=1e-6) for it in spray.iterations)
    assert seen == {1.0, 2.0}


def test_a_finite_burst_ends_when_its_bytes_are_through_and_an_off_window_carries_nothing():
    text = """
name: bursts
duration_s: 3
traffic:
  - flows:
      - {src: 10.0.0.1, dst: 10.0.1.1, bytes: 25GB, every_s: 1}
      - {src: 10.0.0.2, dst: 10.0.1.2, on_s: 0.5, off_s: 0.5}
"""
    timeline, _ = run_arm(text, 1, railyard_placer(DEMO), spray_routing)
    ends = [(b.start_s, b.end_s) for b in timeline.bursts]
    assert ends == [(0.0, pytest.approx(0.5)), (1.0, pytest.approx(1.5)), (2.0, pytest.approx(2.5))]
    # The on/off flow sent for half of each second at the NIC rate.
    assert timeline.moved[1] == pytest.approx(1.5 * NIC_BPS)


def test_a_burst_still_sending_delays_the_next_one_as_the_emulations_sender_does():
    text = """
name: queued
duration_s: 3.5
traffic:
  - flows:
      - {src: 10.0.0.1, dst: 10.0.1.1, bytes: 75GB, every_s: 1}
"""
    timeline, _ = run_arm(text, 1, railyard_placer(DEMO), spray_routing)
    # 1.5 s per burst at 400 Gb/s: each waits for the one before, and is timed from its own opening.
    done = [(b.start_s, b.end_s) for b in timeline.bursts]
    assert done == [(0.0, pytest.approx(1.5)), (1.0, pytest.approx(3.0))]
    assert [(b.start_s, b.end_s) for b in timeline.unfinished_bursts()] == [(2.0, None), (3.0, None)]


def test_no_arm_beats_the_optimum_and_the_bound_is_tight_where_it_is_exact():
    text = """
name: mix
duration_s: 3
traffic:
  - {jobs: 0.9, sizes: {4: 1, 8: 2, 16: 1}, collectives: {ring: 2, tree: 1, all-to-all: 1},
     message_bytes: 20GB, iterations: 50, compute_gap_s: 0.1}
events: [{at_s: 1.5, link_down: 'ryl0r0:5'}]
"""
    result = simulate(MID, parse_workload(text), seed=3)  # OptimumBeaten would be raised
    arms = result.arms or {}
    optimum = arms["optimum"].jobs
    assert optimum and set(arms) == {
        "first-fit+ecmp",
        "topology+ecmp",
        "railyard+ecmp",
        "spray",
        "railyard+te",
        "optimum",
    }
    for name, figures in arms.items():
        if name == "optimum":
            continue
        assert figures.overall.iterations > 0
        for job_id, row in figures.jobs.items():
            assert min(row.times_s or [], default=math.inf) >= optimum[job_id].p50_s * (1 - 1e-6)
    written = result.as_json()
    assert "phases" not in written and "fraction_of_optimum" not in written["cycles"][0]
    assert "placement" not in written["arms"]["optimum"] and "method" in written["arms"]["optimum"]["overall"]
    # The cut bounds never exceed the exact LP (both are lower bounds; on a healthy fabric the NIC cut is tight).
    cuts = Cuts(Network(MID))
    arm = build_arms(MID, parse_workload(text), 3)[1]["railyard"]
    for job in arm.jobs:
        pairs = [(arm.flows[i].src, arm.flows[i].dst) for i in job.transfers]
        if pairs:
            exact = lp_time_s(MID, pairs, 8e9, ())
            assert cuts.time_s(pairs, 8e9, cuts.network.capacity) == pytest.approx(exact, rel=1e-6)
            dead = ("ryl0r0:5",)
            assert cuts.time_s(pairs, 8e9, cuts.network.capacity_without(dead)) <= lp_time_s(MID, pairs, 8e9, dead) * (
                1 + 1e-6
            )


def test_the_command_runs_a_training_mix_on_the_2k_spec(tmp_path, capsys):
    args = ["simulate", "--workload", "training-mix-large", "--spec", "rail-2k.yaml", "--duration", "2"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "railyard+te" in out and "optimum" in out
    (path,) = tmp_path.glob("*.json")
    result = json.loads(path.read_text())
    assert result["arms"]["railyard+te"]["overall"]["iterations"] > 0
    assert path.with_suffix(".png").stat().st_size > 0


def test_an_iteration_still_running_at_the_end_counts_once_it_is_past_the_optimum():
    (job,) = run_arm(RING_ALONE, 1, railyard_placer(DEMO), ecmp_routing)[1].jobs
    bounds: Bounds = {"ring": {(): JobBound(0.7, "lp")}}
    healthy = conditions(DEMO, ())
    stalled, _ = arm_figures([], [Iteration("ring", 0, 0.0, 1.0)], [job], bounds, bounds, healthy, "ecmp")
    assert stalled["ring"].times_s == [1.0] and stalled["ring"].unfinished_counted == 1
    started, _ = arm_figures([], [Iteration("ring", 0, 0.0, 0.5)], [job], bounds, bounds, healthy, "ecmp")
    assert started["ring"].iterations == 0  # too early to tell
    with pytest.raises(OptimumBeaten):
        arm_figures([Iteration("ring", 0, 0.0, 0.5)], [], [job], bounds, bounds, healthy, "ecmp")


def test_railyard_ecmp_hashes_railyards_placement_with_nothing_steered():
    """E-ECMP, as the emulated ECMP run has it: Railyard's servers and the
    QP source ports its placement named, hashed by the switches with no
    controller to install the job's entries."""
    workload = load_workload("training-narrow")
    fabric = load_fabric(spec_file(workload))
    _, arms = build_arms(fabric, workload, seed=1)
    prep = prepare(Network(fabric), arms["railyard"], links_die=False)
    steered = prep.steered_route
    hashed = unsteered(prep)
    assert (steered >= 0).any()  # placement steers its QPs, each to a spine
    assert (hashed.steered_route == -1).all()
    assert [f.key for f in hashed.arm.flows] == [f.key for f in prep.arm.flows]  # the same 5-tuples, hence hashes
    assert (hashed.hashes == prep.hashes).all()
