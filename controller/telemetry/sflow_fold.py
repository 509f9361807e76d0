"""sFlow datagrams folded into what the TE engine reads: flow records and
port samples. Pure: decoded datagrams and an explicit time in, records out.

Who may speak, and who they are:
- an agent is heard only if its address is allowed (`AgentPolicy`); anything
  else is refused and counted (`unknown_agent`), and never changes state;
- each (agent, sub-agent) is one switch. An OpenFlow switch says which in its
  counter samples (the sFlow OpenFlow port structure: its datapath id, and
  the OpenFlow port of each ifIndex), as Open vSwitch does; an agent with no
  such structure is named, with its ifIndex map, by the agents file. Samples
  that arrive before the switch is known are refused (`unbound`);
- a datagram's sequence number must move forward. A repeat or an older one
  (a replay, a duplicate) is refused (`sequence`); a smaller number with the
  uptime of an agent just started (under a minute) is the agent restarting,
  and starts it afresh.

Flows (elephant detection in the manner of sFlow-RT): each sampled packet
stands for `sampling_rate` packets of its size, at every switch that sampled
it. A flow's bytes are summed over the switches on its path and divided by
their number (each switch sees all of the flow), in an exponentially
decaying sum (time constant `tau_s`); its rate is that sum over the time it
covers, exact for a steady flow however young. A flow is reported once it
has `min_samples` samples in the decaying window, so mice, which are
rarely sampled, never make records, while an elephant does within a few
hundred milliseconds. With n samples the estimate of its packets is within
±196/√n % at 95 % confidence (sFlow.org, "Packet Sampling Basics"): the
`error_bound` each record carries. Where the flow left its ingress leaf
(and a second hashing switch, a three-tier spine) comes from the output
port of that switch's latest sample.

Ports: generic interface counters give each port's octets out and oper
status; the rate is the difference of two counter samples over the agent's
own uptime between them. A switch exports counters every polling interval
(1 s or more): a port's latest rate is reported, dated now, until two
intervals pass without a new sample, then no more (the engine then treats
the port as unreported, as it would a silent agent).

Rates are in the fabric's real units: an emulated link's counts are scaled
by its capacity over its emulated rate (1 on a real fabric).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.fabric import Endpoint, Fabric, Tier
from controller.fabric import addressing as ad
from controller.te.view import FlowKey, PortSample
from controller.te.view import FlowSample as FlowRecord
from controller.telemetry.sflow_datagram import CounterSample, Datagram, FlowSample, parse_headers

# Datagram and sample outcomes: metric labels.
DATAGRAM_REFUSALS = ("unknown_agent", "sequence")
SAMPLE_OUTCOMES = ("accepted", "unbound", "unknown_port", "not_fabric", "flow_table_full")


UNKNOWN_COUNTER = (1 << 64) - 1  # sFlow's "not available"
# A sequence that goes back is a restart only with the uptime of one: an older
# datagram played again carries its old, longer uptime and is refused. (sFlow
# has no authentication: a replay of an agent's first minute would still
# pass, and cost it the switch binding until its next counter sample.)
RESTART_UPTIME_MS = 60_000
LOCAL_PORTS = 0xFF00  # OpenFlow 1.0's reserved port numbers (OVS names its LOCAL port 65534 in sFlow)


@dataclass(frozen=True)
class StaticAgent:
    """An agent named by the agents file: for switches whose counter samples
    carry no OpenFlow port structure (SONiC, EOS, Cumulus, Junos)."""

    address: str
    switch: str
    ports: Mapping[int, int]  # ifIndex -> the spec's port
    sub_agent: int = 0


@dataclass(frozen=True)
class AgentPolicy:
    """Which agent addresses are heard. `networks`: allowed for agents that
    name themselves by OpenFlow datapath id; `static`: agents named by file."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    )
    static: tuple[StaticAgent, ...] = ()

    def allows(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return any(ip in n for n in self.networks) or any(a.address == address for a in self.static)


@dataclass(frozen=True)
class FoldConfig:
    # The flow estimate's decay time constant: at 30 samples a second of a
    # line-rate flow per switch (sFlow's rule at 4 KB frames), a flow crossing
    # three switches is reported from 18 % of line rate with 0.5 s, from 9 %
    # with 1 s (Hedera's elephants start at 10 %).
    tau_s: float = 1.0
    min_samples: float = 8.0  # decayed samples before a flow is reported (±69 % at 95 %)
    max_flows: int = 100_000  # flows tracked at once; a sample of a new flow beyond it is refused
    forget_after_s: float = 5.0  # a flow with no sample this long is dropped
    hold_intervals: float = 2.0  # a port's counter rate is held this many polling intervals


@dataclass
class _Agent:
    """One (agent, sub-agent): its sequence and the switch it is."""

    sequence: int
    uptime_ms: int
    switch: str | None = None
    ports: dict[int, int] = field(default_factory=dict)  # ifIndex -> port


@dataclass(slots=True)  # up to max_flows of them: a third of the memory
class _Flow:
    bytes: float  # decayed sum of estimated bytes (real units), all switches
    samples: float  # decayed sample count
    at: float  # when the sums were last decayed
    first: float  # first sample
    hops: int  # switches on its path
    ingress: Endpoint | None = None
    transit: Endpoint | None = None


@dataclass
class _Port:
    uptime_ms: int
    octets: int
    discards: int
    up: bool
    at: float  # arrival of the latest counter sample
    interval_s: float = 1.0  # between the last two
    tx_bps: float | None = None


@dataclass(frozen=True)
class Verdict:
    """What became of one datagram: refused (a DATAGRAM_REFUSALS reason) or
    accepted; its samples' outcomes (SAMPLE_OUTCOMES); datagrams it says
    were lost before it (a gap in the sequence)."""

    refused: str | None
    samples: Mapping[str, int]
    lost: int = 0
    restarted: bool = False


class SflowFold:
    def __init__(self, fabric: Fabric, policy: AgentPolicy = AgentPolicy(), config: FoldConfig = FoldConfig()) -> None:
        self.fabric = fabric
        self.policy = policy
        self.config = config
        self._by_dpid = {sw.dpid: name for name, sw in fabric.switches.items()}
        self._agents: dict[tuple[str, int], _Agent] = {}
        self._flows: dict[FlowKey, _Flow] = {}
        self._ports: dict[Endpoint, _Port] = {}
        rates = fabric.spec.rates
        self._nic_scale = rates.nic_gbps * 1e9 / (rates.emulated_nic_mbps * 1e6)
        self._static = {(a.address, a.sub_agent): a for a in policy.static}

    # --- datagrams -------------------------------------------------------
    def accept(self, datagram: Datagram, now: float) -> Verdict:
        if not self.policy.allows(datagram.agent):
            return Verdict("unknown_agent", {})
        ident = (datagram.agent, datagram.sub_agent)
        agent = self._agents.get(ident)
        restarted = lost = 0
        if agent is not None:
            if datagram.sequence <= agent.sequence:
                if datagram.uptime_ms >= agent.uptime_ms or datagram.uptime_ms > RESTART_UPTIME_MS:
                    return Verdict("sequence", {})
                restarted = 1  # a smaller sequence, and an uptime of a fresh start: the agent started over
                agent.ports.clear()
                agent.switch = None
            else:
                lost = datagram.sequence - agent.sequence - 1
            agent.sequence, agent.uptime_ms = datagram.sequence, datagram.uptime_ms
        else:
            agent = self._agents[ident] = _Agent(datagram.sequence, datagram.uptime_ms)
            static = self._static.get(ident)
            if static is not None:
                agent.switch, agent.ports = static.switch, dict(static.ports)
        outcomes: dict[str, int] = {}
        for counters in datagram.counters:
            self._counters(agent, counters, datagram.uptime_ms, now, outcomes)
        for sample in datagram.flows:
            outcome = self._flow(agent, sample, now)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return Verdict(None, outcomes, lost, bool(restarted))

    def _counters(self, agent: _Agent, sample: CounterSample, uptime_ms: int, now: float, out: dict) -> None:
        for port in sample.ports:
            if port.openflow is not None:
                dpid, number = port.openflow
                if number >= LOCAL_PORTS:
                    continue  # the bridge's own port (OVS's LOCAL): no link of the fabric
                switch = self._by_dpid.get(dpid)
                if switch is None or number not in self.fabric.ports(switch):
                    out["unknown_port"] = out.get("unknown_port", 0) + 1
                    continue
                agent.switch = switch
                agent.ports[port.if_index] = number
            if agent.switch is None:
                out["unbound"] = out.get("unbound", 0) + 1
                continue
            number_or_none = agent.ports.get(port.if_index)
            if number_or_none is None:
                out["unknown_port"] = out.get("unknown_port", 0) + 1
                continue
            self._port(Endpoint(agent.switch, number_or_none), port.out_octets, port.out_discards, port.oper_up,
                       uptime_ms, now)  # fmt: skip
            out["accepted"] = out.get("accepted", 0) + 1

    def _port(self, egress: Endpoint, octets: int, discards: int, up: bool, uptime_ms: int, now: float) -> None:
        before = self._ports.get(egress)
        if before is not None and uptime_ms == before.uptime_ms:
            return  # the same counters again
        readable = octets != UNKNOWN_COUNTER  # a port without carrier may have none
        port = _Port(uptime_ms, octets if readable else -1, discards, up, now)
        if not readable:
            port.tx_bps = None if up else 0.0  # a port that is down sends nothing, and that it is down matters
        elif before is not None and 0 <= before.octets <= octets and uptime_ms > before.uptime_ms:
            dt = (uptime_ms - before.uptime_ms) / 1000
            link = self.fabric.link_at(egress)
            port.tx_bps = (octets - before.octets) * 8 / dt * link.capacity_bps / link.emulated_bps
            port.interval_s = dt
        self._ports[egress] = port

    def _flow(self, agent: _Agent, sample: FlowSample, now: float) -> str:
        if agent.switch is None:
            return "unbound"
        switch = agent.switch
        in_port = agent.ports.get(sample.input_if)
        out_port = agent.ports.get(sample.output_if)
        if in_port is None:
            return "unbound"  # its ifIndex not named yet by a counter sample
        headers = parse_headers(sample.header)
        if headers is None or not headers.protocol:
            return "not_fabric"
        key: FlowKey = (headers.src, headers.dst, headers.protocol, headers.src_port, headers.dst_port)
        flow = self._flows.get(key)
        if flow is None:
            hops = self._hops(headers.src, headers.dst)
            if hops is None:
                return "not_fabric"
            if len(self._flows) >= self.config.max_flows:
                return "flow_table_full"
            flow = self._flows[key] = _Flow(0.0, 0.0, now, now, hops)
        self._decay(flow, now)
        flow.bytes += sample.frame_length * sample.sampling_rate * self._nic_scale / flow.hops
        flow.samples += 1
        if out_port is not None:
            self._locate(flow, headers.src, switch, in_port, out_port)
        return "accepted"

    def _hops(self, src: str, dst: str) -> int | None:
        try:
            a, b = ad.parse_nic_address(src), ad.parse_nic_address(dst)
        except ad.AddressError:
            return None
        if not (self.fabric.has_nic(a) and self.fabric.has_nic(b)):
            return None
        vias = self.fabric.vias(a, b)
        return len(self.fabric.egress_path(a, b, vias[0] if vias else None)) - 1  # every equal-cost path is as long

    def _locate(self, flow: _Flow, src: str, switch: str, in_port: int, out_port: int) -> None:
        """Where the switch sent it: the ingress leaf's uplink, or a second hashing switch's way up."""
        ports = self.fabric.ports(switch)
        into, out = ports.get(in_port), ports.get(out_port)
        if into is None or out is None or out.is_access:
            return
        here = self.fabric.switch(switch)
        if into.is_access:
            if here.tier is Tier.LEAF and self.fabric.attachment(ad.parse_nic_address(src)).node == switch:
                flow.ingress = Endpoint(switch, out_port)
            return
        below = self.fabric.switch(into.peer(switch).node).tier.level < here.tier.level
        above = self.fabric.switch(out.peer(switch).node).tier.level > here.tier.level
        if below and above:
            flow.transit = Endpoint(switch, out_port)

    def _decay(self, flow: _Flow, now: float) -> None:
        if now > flow.at:
            k = math.exp(-(now - flow.at) / self.config.tau_s)
            flow.bytes *= k
            flow.samples *= k
            flow.at = now

    # --- what the engine reads ------------------------------------------
    def records(self, now: float) -> tuple[list[tuple[FlowKey, FlowRecord]], list[tuple[Endpoint, PortSample]], list]:
        """Flow records of the flows sampled enough, port samples of the ports
        heard lately, and each flow record's 95 % relative error bound."""
        cfg = self.config
        flows, bounds = [], []
        for key in [k for k, f in self._flows.items() if now - f.at > cfg.forget_after_s]:
            del self._flows[key]
        for key, flow in self._flows.items():
            self._decay(flow, now)
            if flow.samples < cfg.min_samples:
                continue
            covered = cfg.tau_s * (1 - math.exp(-max(now - flow.first, 1e-3) / cfg.tau_s))
            rate = flow.bytes * 8 / covered
            flows.append((key, FlowRecord(rate, 0, now, flow.ingress, flow.transit)))
            bounds.append(1.96 / math.sqrt(flow.samples))
        ports = [
            (egress, PortSample(p.tx_bps, 0, p.discards, now, p.up))
            for egress, p in self._ports.items()
            if p.tx_bps is not None and now - p.at <= cfg.hold_intervals * max(p.interval_s, 1.0)
        ]
        return flows, ports, bounds

    def known_switches(self) -> Iterable[str]:
        return {a.switch for a in self._agents.values() if a.switch is not None}

    @property
    def flow_count(self) -> int:
        return len(self._flows)
