"""A workload's transport ports. Pure.

Source ports are drawn from the seed, per protocol, over the whole workload;
destination ports are unique per receiver (emulation/model/pairs.flow_ports).
The emulation and the simulator draw them alike, so a seed gives both the
same 5-tuples, hence the same ECMP hash."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from controller.fabric import NicId
from emulation.model.pairs import flow_ports

BYSTANDER = "bystander"  # an incast's bystander elephant's role


class Flow(Protocol):
    @property
    def src(self) -> NicId: ...
    @property
    def dst(self) -> NicId: ...
    @property
    def protocol(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def src_port(self) -> int: ...  # named by a job's placement; 0: drawn


def workload_ports(flows: Sequence[Flow], seed: int) -> dict[int, tuple[int, int]]:
    """Per flow index, (source port, destination port). Bystanders come last
    in their draw, so a workload's other flows keep the ports they have
    without one. A QP whose placement named its source port keeps that one
    (drawn all the same, so no other flow's ports move)."""
    ports: dict[int, tuple[int, int]] = {}
    for protocol in ("tcp", "udp"):
        chosen = sorted(
            (i for i, f in enumerate(flows) if f.protocol == protocol), key=lambda i: flows[i].role == BYSTANDER
        )
        pairs = [(flows[i].src, flows[i].dst) for i in chosen]
        ports.update(zip(chosen, flow_ports(pairs, protocol, seed)))
    return _named_ports_kept(flows, ports)


def _named_ports_kept(flows: Sequence[Flow], drawn: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The drawn ports, with each named source port in place of the drawn
    one, and a drawn port that a named one took at the same sender moved to
    the next free port (a sender binds each port once)."""
    named = {(f.src, f.protocol, f.src_port) for f in flows if f.src_port}
    if not named:
        return drawn
    used = named | {(f.src, f.protocol, drawn[i][0]) for i, f in enumerate(flows) if not f.src_port}
    out = {}
    for i, f in enumerate(flows):
        sport, dport = drawn[i]
        if f.src_port:
            sport = f.src_port
        elif (f.src, f.protocol, sport) in named:
            while (f.src, f.protocol, sport) in used:
                sport = sport % 65535 + 1
            used.add((f.src, f.protocol, sport))
        out[i] = (sport, dport)
    return out
