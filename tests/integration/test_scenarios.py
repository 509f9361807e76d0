"""A scenario end to end: the ECMP run and the TE run on fresh fabrics, with the
real daemon and telemetry agent, judged against the max-min optimum."""

import pytest

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import run_scenario
from emulation.workload import load_workload, spec_file, workload_from_dict


def measured_report(fabric, spec, scenario, seed):
    """The scenario's report, run again if an iperf3 flow failed to report
    (the harness failed to measure; no figure of that run means anything).
    Three times in a row is a failure of the test. On a loaded machine the
    incast's third UDP sender can start after the first two already flood
    the receiver's port: iperf3 3.12 sends the datagram that sets up a UDP
    stream once, never again, and when the full queue drops it the client
    waits until it is stopped, having sent nothing (2 runs in 3 under two
    busy cores, 0 in 8 on a quiet machine)."""
    for _ in range(3):
        report = build_report(fabric, scenario, seed, run_scenario(fabric, spec, scenario, seed))
        if not report.failed_flows:
            break
    return report


def test_elephant_collision_is_fixed_by_te():
    fabric = load_fabric()
    scenario = load_workload("elephant")
    seed = 3  # a seed whose ECMP hash collides on several uplinks
    report = measured_report(fabric, None, scenario, seed)
    ecmp, te = report.modes["ecmp"], report.modes["te"]
    assert ecmp.totals.fraction_of_optimum < 0.8, "this seed should collide under ECMP"
    assert te.totals.fraction_of_optimum >= 0.85
    assert te.totals.fraction_of_optimum > ecmp.totals.fraction_of_optimum + 0.2
    assert te.te_decisions["collision"] >= 1 and te.te_decisions["reroute"] >= 1
    fix = te.te.collision_to_fix_s
    assert fix.median is not None and fix.median <= 1.0
    assert not report.failed_flows


def test_link_failure_traffic_moves_off_the_dead_uplink_and_no_flow_starves():
    fabric = load_fabric()
    scenario = load_workload("link-failure")
    report = measured_report(fabric, None, scenario, 3)
    te, ecmp = report.modes["te"], report.modes["ecmp"]
    assert te.te_decisions["link-down"] >= 1 and te.te_decisions["reroute"] >= 1
    assert max(f.longest_zero_s for f in te.flows) <= 2, [f.longest_zero_s for f in te.flows]
    # Under the static ECMP underlay, flows hashed toward the dead link's far side stay black-holed.
    assert max(f.longest_zero_s for f in ecmp.flows) > 2
    assert te.totals.aggregate_mbps > ecmp.totals.aggregate_mbps


def test_incast_is_metered_at_the_sending_leaves_fairly_and_the_bystander_keeps_its_share():
    scenario = load_workload("incast")
    spec = spec_file(scenario)
    fabric = load_fabric(spec)
    report = measured_report(fabric, spec, scenario, 3)
    te, ecmp = report.modes["te"], report.modes["ecmp"]
    assert te.te_decisions["incast"] >= 1 and te.policed > 0 and ecmp.policed == 0
    # Where the incast converges: under ECMP its queues sit full; metered, they are mostly empty. (Their
    # p99, and the fabric's worst queue, are set by the bystander's TCP, which fills its own bottleneck.)
    te_into, ecmp_into = te.incast, ecmp.incast
    assert te_into is not None and ecmp_into is not None
    assert te_into.converging_queue_p50_bytes < ecmp_into.converging_queue_p50_bytes, (te_into, ecmp_into)
    assert te_into.converging_drops * 10 < ecmp_into.converging_drops, (te_into, ecmp_into)
    assert te.drops < ecmp.drops
    assert te_into.senders_jain >= 0.9, te.flows
    # The bystander's TCP gets 96-98 % of its fair rate on a quiet machine and 90 % in a loaded
    # CI run (the daemon, the agent and the switches share two cores); under ECMP, 9 %.
    assert te_into.bystander_share is not None and ecmp_into.bystander_share is not None
    assert te_into.bystander_share >= 0.8 > ecmp_into.bystander_share, te.flows
    errors = [(mode, f.flow, f.error) for mode, m in report.modes.items() for f in m.flows if f.error]
    assert not errors, errors


def test_a_two_iteration_job_takes_what_its_bytes_need_at_line_rate():
    """A ring across two pods, each NIC sending one flow and receiving one: no
    flow shares a link, so each iteration is its bytes over the NIC's rate."""
    fabric = load_fabric()
    workload = workload_from_dict(
        {
            "name": "two-iterations",
            "duration_s": 6,
            "traffic": [
                {
                    "job": "pair",
                    "gpus": 4,
                    "servers": ["ryh0s0", "ryh1s0"],
                    "message_bytes": "80GB",  # 1.5 x S/2 = 60 GB per flow: 1.2 s at 400 Gb/s
                    "iterations": 2,
                    "compute_gap_s": 0.5,
                }
            ],
        }
    )
    report = build_report(fabric, workload, 1, run_scenario(fabric, None, workload, 1))
    bound = 60e9 * 8 / 400e9  # the same in the emulation: bytes and rate scale alike
    for mode, figures in report.modes.items():
        (job,) = figures.jobs
        assert job.iterations_finished == 2, (mode, job)
        times = [t for _, t in job.times_s if t is not None]
        # Never under the bound; over it by headers (~1 % at MTU 9000), TCP's sawtooth and, on
        # this 2-core machine, the daemon and the agent sharing the CPU with the emulated switches
        # (up to 1.27x seen in CI): a collision would double it.
        assert all(bound <= t <= 1.5 * bound for t in times), (mode, times, bound)
        starts = [start for start, _ in job.times_s]
        assert starts[1] >= starts[0] + times[0] + 0.5 - 0.01, (mode, job.times_s)  # the compute gap
        assert job.optimum_iteration_s[0].seconds == pytest.approx(bound, rel=1e-3)
        assert job.dispatch_overhead.max_share_of_iteration < 0.05


def test_queue_pairs_placed_apart_are_pinned_on_their_named_ports_from_the_first_packet():
    """A ring over three pods on uplinks 2/3 of a NIC, two QPs per connection:
    no connection fits one uplink, so placement puts its QPs on two spines and
    names their source ports, and the switches pin each QP on its port. No QP
    shares an uplink from the first packet: TE sees no collision, and no
    iteration takes as long as the ECMP run's slowest, where the hash puts two
    QPs of a connection (the same ports) on one uplink, 1.5x as long."""
    spec = SPECS_DIR / "narrow-uplinks.yaml"
    fabric = load_fabric(spec)
    workload = workload_from_dict(
        {
            "name": "qps-apart",
            "duration_s": 8,
            "traffic": [
                {
                    "job": "ring",
                    "gpus": 6,
                    "gpus_per_server": 2,
                    "servers": ["ryh0s0", "ryh1s0", "ryh2s0"],
                    "message_bytes": "48GB",  # 2(n-1)/n x S/k = 40 GB per connection: 0.8 s at 400 Gb/s
                    "iterations": 2,
                    "compute_gap_s": 0.5,
                    "qps_per_connection": 2,
                }
            ],
        }
    )
    report = build_report(fabric, workload, 1, run_scenario(fabric, spec, workload, 1))
    te, ecmp = report.modes["te"], report.modes["ecmp"]
    bound = 40e9 * 8 / 400e9
    slowest = {mode: max(t for _, t in f.jobs[0].times_s if t is not None) for mode, f in report.modes.items()}
    assert ecmp.jobs[0].iterations_finished == 2 and slowest["ecmp"] >= 1.4 * bound, slowest  # the hash collides
    assert te.jobs[0].iterations_finished == 2
    assert te.te_decisions.get("collision", 0) == 0 and te.te_decisions.get("reroute", 0) == 0, te.te_decisions
    # Not against the bound: on this 2-core machine under the whole suite the
    # slowest TE iteration read 1.41x it, the ECMP run's 1.74x (1.5x the
    # collision's alone); standalone, TE's read at most 1.3x.
    assert slowest["te"] <= 0.9 * slowest["ecmp"], slowest


def test_every_item_and_event_kind_runs():
    workload = load_workload("every-kind")
    spec = spec_file(workload)
    fabric = load_fabric(spec)
    report = build_report(fabric, workload, 2, run_scenario(fabric, spec, workload, 2))
    te, ecmp = report.modes["te"], report.modes["ecmp"]
    nic_mbps = fabric.spec.rates.emulated_nic_mbps
    assert not te.skipped_events
    assert [e.split()[0] for e in ecmp.skipped_events] == ["drain", "undrain"]  # no controller to drain
    for figures in (te, ecmp):
        (train,) = figures.jobs
        assert train.iterations_finished >= 4, train
        (incast,) = figures.bursts
        assert incast.bursts == 3 * 5 and (incast.delivered_share.mean or 0) > 0.2, incast
        (on_off,) = figures.on_off
        assert on_off.flows == 6 and (on_off.goodput_while_on_mbps.mean or 0) > 0.1 * nic_mbps, on_off
        steady = {f.flow: f.goodput_mbps for f in figures.flows}
        # The mix's job and the explicit flow among them.
        assert len(steady) == 5 and all(v > 0.02 * nic_mbps for v in steady.values()), steady
        # The explicit flow (the last steady one) keeps to its cap: 100 of 400 Gb/s, a quarter of the
        # emulated NIC (iperf3 meters TCP per interval, not per packet: within 15 %), where alone it
        # would take the whole NIC.
        cap_mbps = 100 / fabric.spec.rates.nic_gbps * nic_mbps
        assert figures.flows[-1].goodput_mbps <= cap_mbps * 1.15, (figures.flows[-1], cap_mbps)
