"""The machine's CPU time, read from Linux's /proc/stat: what a scenario run
reports beside its figures (emulation/scenarios/machine.py)."""

import time

import pytest

from emulation.scenarios.machine import CpuTicks, HostCpu


def test_busy_and_stolen_are_fractions_of_every_cpus_time(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 10 0 10 30 0 0\ncpu0 50 0 25 400 5 0 5 15 0 0\n")
    before = CpuTicks.read(stat)
    assert before == CpuTicks(busy=160, stolen=30, total=1000)
    stat.write_text("cpu  200 0 100 1500 10 0 20 70 0 0\n")
    after = CpuTicks.read(stat).since(before)
    assert (after.busy, after.stolen) == pytest.approx((160 / 900, 40 / 900))
    assert before.since(before) == HostCpu(0.0, 0.0)  # no tick between two reads: nothing to divide


def test_this_machines_cpus_read_busy_while_this_process_computes():
    before = CpuTicks.read()
    until = time.process_time() + 0.3
    while time.process_time() < until:
        pass
    cpu = CpuTicks.read().since(before)
    assert 0.0 < cpu.busy <= 1.0 and 0.0 <= cpu.stolen < 1.0
