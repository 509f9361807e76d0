"""What bench.crossval compares, and how: a permutation by its goodput, a
training mix by its jobs' iterations; any other traffic is refused with
what it was."""

from __future__ import annotations

import pytest

from bench.crossval import iterating, simulated_workload
from emulation.workload import load_workload
from emulation.workload.model import Telemetry


@pytest.mark.parametrize("name", ["training-planes", "training-narrow", "training-three-pod"])
def test_a_training_mix_is_compared_by_its_iterations(name):
    scenario = load_workload(name)
    assert iterating(scenario)
    assert simulated_workload(scenario, Telemetry(interval_s=0.1)).telemetry.interval_s == 0.1


def test_a_permutation_is_compared_by_goodput_and_anything_else_refused():
    assert not iterating(load_workload("elephant"))
    simulated_workload(load_workload("elephant"), Telemetry())
    with pytest.raises(ValueError, match=r"incast: traffic .*one permutation, or jobs with iterations"):
        simulated_workload(load_workload("incast"), Telemetry())
