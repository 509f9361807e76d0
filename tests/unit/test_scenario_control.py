"""The ECMP run held against the simulator's for the same hash: a run the
machine fell short in says so, in the JSON and the table (control.py)."""

import json
from dataclasses import replace

import pytest

from emulation.cli.scenario import with_ecmp_control
from emulation.scenarios.control import AGREEMENT_POINTS, ecmp_control
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import ScenarioMode
from emulation.scenarios.table import table
from emulation.workload import load_workload
from tests.unit.test_scenario_report import FABRIC, _on_failed_leaf, _run

SIMULATED = [(0.0, 0.866), (4.0, 0.743)]  # the demo's link failure, seed 1, ECMP as simulated


def _ecmp(share_before_failure: float):
    """The demo's link failure on ECMP, every flow at `share_before_failure`
    of its optimum rate before the failure and at its optimum rate after."""
    scenario = load_workload("link-failure")

    def rate(flow, second):
        if second < 4:
            return 50e6 * share_before_failure
        return 25e6 if _on_failed_leaf(flow) else 50e6

    return build_report(FABRIC, scenario, 1, {ScenarioMode.ECMP: _run(FABRIC, scenario, ScenarioMode.ECMP, rate)})


def test_an_ecmp_phase_far_below_the_simulators_calls_the_machine_short():
    report = _ecmp(0.629)  # a demo run's ECMP in its first 4 s, when its TE read 92.5% overall
    control = ecmp_control(report.modes["ecmp"], SIMULATED)
    assert control is not None and control.machine_short
    assert [p.points for p in control.phases] == pytest.approx([-23.7, 25.7])
    shown = replace(report, ecmp_against_simulator=control)
    assert table(shown).splitlines()[-1] == (
        "ECMP against the simulator, same hash (points): 0-4 s -23.7, 4-12 s +25.7; more than 5 below it: "
        "the machine fell short in this run, so its figures may be the machine's as much as the routing's"
    )
    written = json.loads(json.dumps(shown.as_json()))["ecmp_against_simulator"]
    assert written["machine_short"] is True and written["phases"][0]["simulated"] == 0.866


def test_a_phase_within_the_agreement_is_not_short_and_no_common_phase_is_no_control():
    near = _ecmp(0.866 - (AGREEMENT_POINTS - 0.3) / 100)  # the closest of the demo's 17 good runs: -4.7
    control = ecmp_control(near.modes["ecmp"], SIMULATED)
    assert control is not None and not control.machine_short
    assert "fell short" not in table(replace(near, ecmp_against_simulator=control))
    assert ecmp_control(near.modes["ecmp"], [(2.0, 0.9)]) is None  # no phase starts where the emulated ones do
    assert "ecmp_against_simulator" not in near.as_json()


def test_a_scenario_run_holds_its_ecmp_run_against_the_real_simulator():
    checked = with_ecmp_control(_ecmp(1.0), FABRIC, load_workload("link-failure"), 1)
    control = checked.ecmp_against_simulator
    assert control is not None and not control.machine_short
    # The simulator's ECMP on this seed collides (86.6% then 74.3%); a run at the optimum reads above it.
    assert [p.simulated for p in control.phases] == pytest.approx([0.866, 0.743], abs=0.005)
