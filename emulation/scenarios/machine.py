"""What the machine's CPUs did while a run's traffic ran: how busy they
were, and how much time the hypervisor gave to other guests (steal). The
userspace datapath forwards every packet on these CPUs, so a run on a
starved VM measures the machine as much as the routing: on 2026-12-07 one
demo link-failure run in twenty read 76.8% of the optimum with its
uncontended flows at 70-80% of their NIC, in the ECMP run too, and what
the CPUs did then was not recorded. Linux's /proc/stat, in clock ticks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")


@dataclass(frozen=True)
class HostCpu:
    """Over an interval, as fractions of every CPU's time."""

    busy: float  # running anything: user, system, interrupts
    stolen: float  # given by the hypervisor to other guests


@dataclass(frozen=True)
class CpuTicks:
    """The machine's CPU time so far, summed over its CPUs."""

    busy: int
    stolen: int
    total: int

    @classmethod
    def read(cls, stat: Path = STAT) -> CpuTicks:
        # cpu  user nice system idle iowait irq softirq steal guest guest_nice
        fields = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
        return cls(user + nice + system + irq + softirq, steal, sum(fields))

    def since(self, before: CpuTicks) -> HostCpu:
        total = self.total - before.total
        if total <= 0:
            return HostCpu(0.0, 0.0)
        return HostCpu((self.busy - before.busy) / total, (self.stolen - before.stolen) / total)
