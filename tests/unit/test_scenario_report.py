"""Scenario files and the report's arithmetic."""

import json
from dataclasses import fields, replace

import pytest

from controller.fabric import Endpoint, NicId, build_fabric, load_fabric, load_spec, parse_spec
from controller.fabric.spec import SPECS_DIR
from controller.te.engine import Decision, DecisionKind
from emulation.model.pairs import incast_pairs, permutation_pairs
from emulation.model.stats import percentile
from emulation.scenarios.emulable import steady_flows
from emulation.scenarios.judge import ControllerFailed, OptimumExceeded, planned_intervals
from emulation.scenarios.machine import HostCpu
from emulation.scenarios.records import PerFlow, Totals
from emulation.scenarios.report import build_report, jain, longest_zero_run_s
from emulation.scenarios.runner import AGENT_AND_FABRIC, ModeRun, ScenarioMode, _daemon
from emulation.scenarios.table import table
from emulation.scenarios.timeline import Decided, read_decisions, te_figures
from emulation.traffic.iperf import FlowResult
from emulation.workload import WorkloadError, load_workload, spec_file
from emulation.workload.events import check_events, spec_uplinks
from emulation.workload.expand import expand
from emulation.workload.placers import railyard_placer

FABRIC = load_fabric()


def scenario_flows(fabric, scenario, seed):
    return steady_flows(fabric, expand(fabric, scenario, seed, railyard_placer(fabric)), scenario.duration_s)


def test_an_unknown_scenario_lists_the_shipped_ones():
    with pytest.raises(WorkloadError, match="elephant"):
        load_workload("no-such-scenario")


def test_traffic_patterns_cross_pods_and_converge():
    pairs = permutation_pairs(FABRIC)
    assert len(pairs) == len(FABRIC.nics) and all(a.pod != b.pod and a.rail == b.rail for a, b in pairs)
    with pytest.raises(WorkloadError, match=r"fan_in.*at most 2"):
        incast_pairs(FABRIC, 3, seed=1, error=WorkloadError)  # the demo fabric has 2 NICs per rail outside any pod
    three_pod = load_fabric(spec_file(load_workload("incast")))
    senders, bystander = incast_pairs(three_pod, 3, seed=1)
    assert len({dst for _, dst in senders}) == 1 and len({src for src, _ in senders}) == 3
    (dst,) = {dst for _, dst in senders}
    assert bystander is not None
    src, beside = bystander
    # The bystander shares the receiver's leaf (so the senders' spine downlinks),
    # not the receiver nor any sender's NIC.
    assert src.pod != dst.pod and src not in {s for s, _ in senders}
    assert all(s.pod != dst.pod for s, _ in senders)  # the incast crosses the spine tier
    assert beside != dst and three_pod.attachment(beside).node == three_pod.attachment(dst).node
    assert len({n.rail for pair in [*senders, bystander] for n in pair}) == 1


def test_report_arithmetic():
    assert jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert longest_zero_run_s((5e6, 0.0, 0.0, 3e6, 0.0)) == 2
    assert percentile([1, 2, 3, 4, 100], 0.99) == 100 and percentile([], 0.5) == 0.0


# --- the report's figures: optimum per phase, the bound, goodput, TE timeline ---


def _run(fabric, scenario, mode, rate_of, seconds=None):
    """A run whose every flow reads `rate_of(flow, second)` at the receiver each second."""
    plan = expand(fabric, scenario, 1, railyard_placer(fabric))
    flows = steady_flows(fabric, plan, scenario.duration_s)
    total = int(scenario.duration_s) if seconds is None else seconds
    results = [FlowResult(f, 0.0, tuple(rate_of(f, k) for k in range(total))) for f in flows]
    return ModeRun(mode, plan, flows, results)


def _on_failed_leaf(flow):
    # ryl0r0 (pod 0, rail 0) loses its uplink to rys0: its two senders and its two receivers share one each way.
    return flow.src.rail == 0 and 0 in (flow.src.pod, flow.dst.pod)


def test_the_optimum_of_a_link_failure_scenario_is_exact_per_phase():
    scenario = load_workload("link-failure")  # ryl0r0:3 down at 4 s of 12, on the demo fabric
    fabric = FABRIC

    def ideal(flow, second):
        return 25e6 if second >= 4 and _on_failed_leaf(flow) else 50e6

    report = build_report(fabric, scenario, 1, {ScenarioMode.ECMP: _run(fabric, scenario, ScenarioMode.ECMP, ideal)})
    before, after = report.optimum.phases
    assert (before.from_s, before.to_s, before.dead_links) == (0.0, 4.0, [])
    assert (after.from_s, after.to_s, after.dead_links) == (4.0, 12.0, ["ryl0r0:3"])
    # Before: 8 NICs at 50 Mb/s. After: the four flows through ryl0r0 get 25, the others 50.
    assert before.aggregate_mbps == pytest.approx(400.0)
    assert after.aggregate_mbps == pytest.approx(300.0)
    assert after.single_path_mbps == pytest.approx(300.0)
    assert report.optimum.aggregate_mbps == pytest.approx((4 * 400 + 8 * 300) / 12)
    assert report.optimum.kind == "max-min fair, splittable"
    ecmp = report.modes["ecmp"]
    # A run at the optimum in each phase is at 100% of it, per phase and overall.
    assert [p.totals.fraction_of_optimum for p in ecmp.phases] == pytest.approx([1.0, 1.0])
    assert ecmp.totals.fraction_of_optimum == pytest.approx(1.0)
    assert ecmp.totals.fraction_of_single_path == pytest.approx(1.0)
    # Per flow, the optimum over its judged seconds (1-3 at 50, 4-11 at 25 or 50).
    hit = [f for f, spec in zip(ecmp.flows, scenario_flows(fabric, scenario, 1)) if _on_failed_leaf(spec)]
    assert len(hit) == 4 and all(f.optimum_mbps == pytest.approx((3 * 50 + 8 * 25) / 11) for f in hit)
    assert "optimum 4-12 s (ryl0r0:3 down): 300.0 Mb/s" in table(report)


def test_a_report_is_written_as_its_records_with_a_runs_totals_and_te_figures_beside_the_rest():
    scenario = load_workload("link-failure")
    run = _run(FABRIC, scenario, ScenarioMode.TE, lambda f, s: 25e6 if s >= 4 and _on_failed_leaf(f) else 50e6)
    report = build_report(FABRIC, scenario, 1, {ScenarioMode.TE: run})
    written = json.loads(json.dumps(report.as_json()))
    te = written["modes"]["te"]
    assert list(te)[:8] == ["flows", *[f.name for f in fields(Totals)], "phases"]
    assert te["fraction_of_optimum"] == report.modes["te"].totals.fraction_of_optimum
    assert te["collision_to_fix_s"]["episodes"] == [] and te["moves_per_flow"] == {"mean": 0.0, "max": 0}
    assert "totals" not in te and "te" not in te and "incast" not in te  # no incast in this scenario
    assert te["phases"][1]["dead_links"] == ["ryl0r0:3"] and "fraction_of_optimum" in te["phases"][1]
    assert te["optimum_check"] == "passed" and written["optimum"]["phases"][1]["aggregate_mbps"] == 300.0


def test_a_run_with_no_goodput_to_judge_reads_dashes_not_zeros():
    # On/off bursts only (training-planes' background, without its job): they
    # are judged by their times, as iterations are, so no flow's goodput has
    # an optimum, and no fraction of one is a figure.
    planes = load_workload("training-planes")
    scenario = replace(planes, traffic=planes.traffic[1:], events=())
    fabric = load_fabric(spec_file(scenario))
    run = _run(fabric, scenario, ScenarioMode.TE, lambda f, s: 0.0)
    assert not run.flows
    report = build_report(fabric, scenario, 1, {ScenarioMode.TE: run})
    te = report.modes["te"]
    assert te.totals.fraction_of_optimum is None and te.totals.aggregate_over_optimum is None
    assert te.jain_fairness is None and all(p.totals.fraction_of_optimum is None for p in te.phases)
    with pytest.raises(ValueError, match="no flow's goodput was judged"):
        te.totals.judged_fraction()
    written = json.loads(json.dumps(report.as_json()))["modes"]["te"]
    assert written["fraction_of_optimum"] is None and written["jain_fairness"] is None
    rows = {line.split("  ")[0].strip(): line for line in table(report).splitlines()}
    for label in ("aggregate goodput (Mb/s)", "fraction of optimum", "Jain's fairness"):
        assert rows[label].split()[-1] == "-", rows[label]
    assert "optimum 0-24 s: - (no flow's goodput judged)" in table(report)
    assert "0.0 Mb/s" not in table(report) and "0.0%" not in table(report) and "0.000" not in table(report)
    assert jain([]) is None and jain([0.0, 0.0]) is None


def test_the_report_raises_on_a_figure_above_the_optimum():
    scenario = load_workload("link-failure")
    # Every flow at line rate all along: after the failure that is 400 Mb/s against an optimum of 300.
    run = _run(FABRIC, scenario, ScenarioMode.TE, lambda flow, second: 50e6)
    with pytest.raises(OptimumExceeded, match=r"te run, 4-12 s: .* 133\.3% of the exact max-min fair") as err:
        build_report(FABRIC, scenario, 1, {ScenarioMode.TE: run})
    kept = err.value.report
    assert kept is not None and kept.optimum.phases[1].aggregate_mbps == 300.0
    assert (kept.modes["te"].optimum_check or "").startswith("failed: te run, 4-12 s: aggregate goodput")
    # Within the tolerance (measurement noise) it stands.
    noisy = _run(
        FABRIC, scenario, ScenarioMode.TE, lambda f, s: (25e6 if s >= 4 and _on_failed_leaf(f) else 50e6) * 1.005
    )
    te = build_report(FABRIC, scenario, 1, {ScenarioMode.TE: noisy}).modes["te"]
    assert te.totals.aggregate_over_optimum == pytest.approx(1.005)
    assert te.totals.fraction_of_optimum == pytest.approx(1.0)  # no flow is credited above its optimum rate


def test_a_fraction_of_the_optimum_credits_each_flow_up_to_its_own_rate():
    scenario = load_workload("link-failure")

    def unfair(flow, second):
        # After the failure the four flows through ryl0r0 share its 100 Mb/s unevenly: its two
        # senders' 35 + 35, its two receivers' 15 + 15.
        if second >= 4 and _on_failed_leaf(flow):
            return 35e6 if flow.src.pod == 0 else 15e6
        return 50e6

    te = build_report(FABRIC, scenario, 1, {ScenarioMode.TE: _run(FABRIC, scenario, ScenarioMode.TE, unfair)})
    after = te.modes["te"].phases[1].totals
    assert after.aggregate_over_optimum == pytest.approx(1.0)
    assert after.fraction_of_optimum == pytest.approx((200 + 25 + 25 + 15 + 15) / 300)


def test_the_report_refuses_a_te_run_whose_controller_failed_a_reconcile_pass():
    scenario = load_workload("elephant")
    run = replace(_run(FABRIC, scenario, ScenarioMode.TE, lambda f, s: 50e6), reconcile_failures=3.0)
    with pytest.raises(ControllerFailed, match=r"te run: the controller failed 3 reconcile pass") as err:
        build_report(FABRIC, scenario, 1, {ScenarioMode.TE: run})
    assert err.value.report is not None and err.value.report.modes["te"].reconcile_failures == 3.0


def test_goodput_counts_the_planned_duration_only():
    scenario = load_workload("elephant")  # 10 s
    # Slow start, then 23 Mb/s for the rest of the 10 s, then 5 s of zeros while iperf3 waits to finish.
    run = _run(FABRIC, scenario, ScenarioMode.ECMP, lambda f, s: 5e6 if s == 0 else 23e6 if s < 10 else 0.0, seconds=15)
    flow = run.results[0]
    assert planned_intervals(flow, scenario.duration_s) == flow.interval_bps[:10]
    report = build_report(FABRIC, scenario, 1, {ScenarioMode.ECMP: run})
    figures = report.modes["ecmp"]
    assert [f.goodput_mbps for f in figures.flows] == pytest.approx([23.0] * 8)
    assert all(f.longest_zero_s == 0 for f in figures.flows)
    # A flow that starts late was asked for duration - start seconds.
    late = FlowResult(replace(flow.flow, start_s=2.0), 0.0, (1.0,) * 12)
    assert len(planned_intervals(late, 10.0)) == 8


def test_link_events_are_checked_against_the_specs_uplinks(tmp_path):
    spec = FABRIC
    path = tmp_path / "s.yaml"
    path.write_text("duration_s: 10\ntraffic: [{pattern: permutation}]\nevents: [{at_s: 4, link_down: ryl0r0:1}]")
    with pytest.raises(WorkloadError) as err:  # port 1 faces a server: not an uplink
        check_events(load_workload(str(path)), spec)
    assert err.value.field == "events[0].link_down"
    assert "ryl0r0:3 (to rys0)" in err.value.allowed and "ryl1r1:4 (to rys1)" in err.value.allowed
    # As (leaf, spine): resolved to the leaf's port facing that spine.
    path.write_text(
        "duration_s: 10\ntraffic: [{pattern: permutation}]\nevents: [{at_s: 4, link_down: {leaf: ryl0r1, spine: rys1}}]"
    )
    (event,) = check_events(load_workload(str(path)), spec).events
    assert event.target == "ryl0r1:4"
    for bad, field in (
        ("{leaf: ryl9r0, spine: rys1}", "events[0].link_down.leaf"),
        ("{leaf: ryl0r1, spine: rys7}", "events[0].link_down.spine"),
        ("nowhere", "events[0].link_down"),
    ):
        path.write_text(f"duration_s: 10\ntraffic: [{{pattern: permutation}}]\nevents: [{{at_s: 4, link_down: {bad}}}]")
        with pytest.raises(WorkloadError) as err:
            check_events(load_workload(str(path)), spec)
        assert err.value.field == field and err.value.allowed
    # The shipped link-failure scenario on a spec where ryl0r0:3 is a server's port is refused, not run.
    wide = parse_spec(
        "name: wide\npods: 2\nservers_per_pod: 4\nrails: 2\nspines: 2\nrates: {nic_gbps: 400, emulated_nic_mbps: 50}"
    )
    with pytest.raises(WorkloadError, match=r"ryl0r0:3 is not an uplink of 'wide'.*ryl0r0:5 \(to rys0\)"):
        check_events(load_workload("link-failure"), build_fabric(wide))


def test_spec_uplinks_match_the_built_fabrics():
    for path in sorted(SPECS_DIR.glob("*.yaml")):
        spec = load_spec(path)
        if spec.pods * spec.servers_per_pod * spec.rails > 4096:
            continue  # the big ones take a while to build; the formula is the same
        fabric = build_fabric(spec)
        built = {
            f"{switch}:{port}": link.peer(switch).node
            for switch in fabric.switches
            for port, link in fabric.ports(switch).items()
            if not link.is_access
            and fabric.switch(switch).tier.level < fabric.switch(link.peer(switch).node).tier.level
        }
        assert spec_uplinks(spec) == built, path.name


FLOW = ("10.0.0.1", "10.0.1.1", "tcp", 30000, 5201)
DECISIONS = [
    Decision(DecisionKind.REROUTE, "x", "during the warm-up", 999.0, flow=FLOW, from_via="rys1", to_via="rys0"),
    Decision(DecisionKind.COLLISION, "ryl0r0:3", "2 elephants", 1000.6, link="ryl0r0:3"),
    Decision(DecisionKind.REROUTE, "f", "its bottleneck -0.50", 1000.8, flow=FLOW, from_via="rys0", to_via="rys1"),
    Decision(DecisionKind.REROUTE, "f", "ACKs pinned", 1004.0, flow=FLOW, from_via="rys1", to_via="rys1"),
    Decision(DecisionKind.COLLISION, "ryl1r0:4", "2 elephants", 1005.0, link="ryl1r0:4"),
    Decision(DecisionKind.EXPIRE, "f", "flow quiet; back to ECMP", 1009.0, flow=FLOW),
]


def test_decisions_are_read_back_from_the_controllers_records(tmp_path):
    """What the TE runner writes (one JSON object a line) reads back as the same decisions."""
    path = tmp_path / "decisions.jsonl"
    path.write_text("".join(json.dumps(d.as_record()) + "\n" for d in DECISIONS))
    read = read_decisions(path, started_at=1000.0)
    assert [d.decision for d in read] == DECISIONS
    assert read[0].at_s == 0.0  # made during the warm-up, before traffic started: its move holds into the run
    assert read[2].at_s == pytest.approx(0.8) and read[2].vias == ("rys0", "rys1")
    assert read[2].nics == (NicId(0, 0, 0), NicId(0, 1, 0))
    assert read_decisions(tmp_path / "none.jsonl", 0.0) == []


def test_collision_to_fix_runs_from_the_first_sample_showing_it_to_the_commit_removing_it():
    decisions = [Decided(d, d.at - 1000.0) for d in DECISIONS[1:]]
    up = Endpoint("ryl0r0", 3)  # ryl0r0's uplink to rys0, full from the 0.5 s sample on
    samples = [(t, {up: 50e6 if t >= 0.5 else 10e6}) for t in (0.25, 0.5, 0.75, 1.0)]
    figures = te_figures(FABRIC, decisions, samples, [0.0], commit_s=0.05, n_flows=8)
    fix = figures.collision_to_fix_s
    first, second = fix.episodes
    # Onset at the 0.5 s sample; the move off rys0 decided at 0.8, committed 0.05 later.
    assert (first.onset_s, first.detected_s, first.fixed_s) == pytest.approx((0.5, 0.6, 0.85))
    assert fix.all == pytest.approx([0.35]) and fix.median == pytest.approx(0.35)
    assert fix.p99 == pytest.approx(0.35)
    # The second collision is never relieved: counted, not timed.
    assert second.fixed_s is None and fix.unfixed == 1
    # Two moves of one flow, one of which changed its path; one flow back to ECMP.
    assert figures.moves_per_flow == PerFlow(mean=2 / 8, max=2)
    assert figures.path_changes_per_flow == PerFlow(mean=1 / 8, max=1)
    assert figures.returned_to_ecmp == 1
    # The move at 4.0 s comes more than 2 s after the last change (traffic start): churn.
    assert figures.last_move_s == pytest.approx(4.0) and figures.moves_in_steady_traffic == 1
    # With a link event at 3.0 s it is the reaction to that event instead.
    again = te_figures(FABRIC, decisions, samples, [0.0, 3.0], commit_s=0.05, n_flows=8)
    assert again.moves_in_steady_traffic == 0
    # A second path change of the flow at 4.5 s: two since the change at 0.0 s, one each with a change at 3.0 s.
    back = Decision(DecisionKind.REROUTE, "f", "back", 1004.5, flow=FLOW, from_via="rys1", to_via="rys0")
    twice = [*decisions, Decided(back, 4.5)]
    assert te_figures(FABRIC, twice, samples, [0.0], 0.05, 8).path_changes_per_flow_per_change_max == 2
    assert te_figures(FABRIC, twice, samples, [0.0, 3.0], 0.05, 8).path_changes_per_flow_per_change_max == 1


def test_report_names_stay_inside_the_output_directory():
    from emulation.scenarios.output import report_stem

    assert report_stem("../../x", "demo", 1) == "_.._x-demo-seed1"
    assert report_stem("a b/c", "demo", 2) == "a_b_c-demo-seed2"
    assert report_stem("elephant", "three-pod", 3) == "elephant-three-pod-seed3"


def test_ecmp_collisions_of_jobs_are_found_from_the_underlays_choice():
    from emulation.model.stats import percentile as nearest_rank
    from emulation.scenarios.iterations import collided_jobs
    from emulation.workload import workload_from_dict

    workload = workload_from_dict(
        {
            "name": "two",
            "traffic": [
                {"job": "a", "gpus": 4, "servers": ["ryh0s0", "ryh1s0"], "message_bytes": "1GB", "iterations": 1},
                {"job": "b", "gpus": 4, "servers": ["ryh0s1", "ryh1s1"], "message_bytes": "1GB", "iterations": 1},
            ],
        }
    )
    plan = expand(FABRIC, workload, 1, railyard_placer(FABRIC))
    on_rail0 = [i for i, t in enumerate(plan.transfers) if t.src.rail == 0]
    # Rail 0: a and b each send one flow each way between pod 0 and pod 1, at line rate.
    same = dict.fromkeys(on_rail0, "rys0")
    hit = collided_jobs(FABRIC, plan, same)
    assert hit["a"] and hit["a"] == hit["b"] and "ryl0r0:3" in hit["a"]
    apart = {i: "rys0" if plan.transfers[i].job == "a" else "rys1" for i in on_rail0}
    assert collided_jobs(FABRIC, plan, apart) == {"a": [], "b": []}
    assert nearest_rank(list(range(1, 11)), 0.99) == 10 and nearest_rank(list(range(1, 101)), 0.99) == 99


def test_the_demo_command_gives_the_scenario_runner_every_option_it_reads():
    """`railyard demo` is `scenario run elephant` with the demo's defaults:
    its arguments must carry everything `scenario run`'s do (a missing one
    broke `make demo` once)."""
    from controller.cli.main import _parser

    demo = vars(_parser().parse_args(["demo"]))
    run = vars(_parser().parse_args(["scenario", "run", "elephant"]))
    assert run.keys() - {"name", "scenario_cmd"} <= demo.keys()


@pytest.mark.parametrize("lost", ["the client has terminated", "interrupt - the server has terminated"])
def test_a_lost_end_of_test_exchange_after_a_full_run_is_no_error_but_a_short_run_is(lost):
    from controller.fabric import NicId
    from emulation.traffic.iperf import CONTROL_LOST, TERMINATED, FlowSpec, parse_receiver_report

    assert lost in (CONTROL_LOST, TERMINATED)
    flow = FlowSpec(NicId(0, 0, 0), NicId(0, 1, 0), "udp", 40000, 4791, 50e6)

    def report(seconds: int) -> dict:
        intervals = [{"sum": {"seconds": 1.0, "bits_per_second": 40e6}} for _ in range(seconds)]
        return {"error": lost, "intervals": intervals}

    full = parse_receiver_report(flow, report(10), expected_s=10.0)
    assert full.error == "" and full.goodput_bps == 40e6 and len(full.interval_bps) == 10
    short = parse_receiver_report(flow, report(4), expected_s=10.0)
    assert short.error == lost  # the client died early, or the server was stopped mid-run: that is an error
    assert parse_receiver_report(flow, {"error": "unable to connect"}).error == "unable to connect"


def test_a_run_starts_from_its_own_records_in_a_workdir_another_run_of_its_mode_used(tmp_path):
    # bench.telemetry runs three TE sources in one seed's workdir: the second read the first's decisions as its own.
    left = {name: tmp_path / name for name in ("decisions-te.jsonl", "controller-te.log", "te.db", "te.db-wal")}
    for path in left.values():
        path.write_text("the last run's\n")
    (tmp_path / "ecmp.db").write_text("another mode's\n")
    daemon = _daemon(FABRIC, SPECS_DIR / "default.yaml", ScenarioMode.TE, tmp_path, AGENT_AND_FABRIC)
    assert daemon.decisions == left["decisions-te.jsonl"] and read_decisions(daemon.decisions, 0.0) == []
    assert not [name for name, path in left.items() if path.exists()]
    assert (tmp_path / "ecmp.db").exists()


def test_a_run_carries_what_the_machines_cpus_did_while_its_traffic_ran():
    scenario = load_workload("link-failure")
    rate = lambda f, s: 25e6 if s >= 4 and _on_failed_leaf(f) else 50e6  # noqa: E731
    run = replace(_run(FABRIC, scenario, ScenarioMode.TE, rate), host_cpu=HostCpu(0.62, 0.031))
    report = build_report(FABRIC, scenario, 1, {ScenarioMode.TE: run})
    assert json.loads(json.dumps(report.as_json()))["modes"]["te"]["host_cpu"] == {"busy": 0.62, "stolen": 0.031}
    rows = {line.split("  ")[0].strip(): line for line in table(report).splitlines()}
    assert rows["host CPU busy / stolen by the hypervisor"].endswith("62% / 3.1%")
    unmeasured = build_report(FABRIC, scenario, 1, {ScenarioMode.TE: replace(run, host_cpu=None)})
    assert "host_cpu" not in json.loads(json.dumps(unmeasured.as_json()))["modes"]["te"]
