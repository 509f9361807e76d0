"""The sFlow v5 decoder and the fold, on datagrams built byte by byte: what a
well-formed agent sends is read exactly; anything else raises Malformed
(never another exception) or is refused by reason, and changes nothing."""

from __future__ import annotations

import contextlib
import math
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.fabric import DEFAULT_SPEC, Endpoint, NicId, build_fabric, load_spec
from controller.fabric import addressing as ad
from controller.telemetry.sflow_datagram import Malformed, decode, parse_headers
from controller.telemetry.sflow_fold import AgentPolicy, FoldConfig, SflowFold, StaticAgent
from tests.fakes.sflow import counter_sample, datagram, ethernet_ipv4, flow_sample

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))
SRC, DST = NicId(0, 0, 0), NicId(0, 1, 0)
KEY = (ad.nic_ip(SRC), ad.nic_ip(DST), "tcp", 40000, 5201)
LEAF = FABRIC.attachment(SRC).node  # ryl0r0; its NIC on port 1, uplinks 3 and 4
HEADER = ethernet_ipv4(ad.nic_ip(SRC), ad.nic_ip(DST))
UPTIME = 3_600_000  # the agent has been up an hour


def test_a_flow_sample_and_a_counter_sample_are_read_exactly():
    raw = datagram(
        [flow_sample(7, 8, 9, 18, HEADER), counter_sample(3, 18, 123456, openflow=(FABRIC.switch(LEAF).dpid, 3))],
        seq=42,
        uptime_ms=5000,
        sub=2,
    )
    d = decode(raw)
    assert (d.agent, d.sub_agent, d.sequence, d.uptime_ms) == ("127.0.0.1", 2, 42, 5000)
    (flow,) = d.flows
    assert (flow.sampling_rate, flow.input_if, flow.output_if, flow.frame_length) == (8, 9, 18, 9018)
    headers = parse_headers(flow.header)
    assert headers is not None and (headers.src, headers.dst, headers.protocol, headers.src_port) == KEY[:4]
    ((port,),) = [c.ports for c in d.counters]
    assert (port.if_index, port.out_octets, port.out_discards, port.oper_up) == (18, 123456, 7, True)
    assert port.openflow == (FABRIC.switch(LEAF).dpid, 3)


def test_the_expanded_flow_sample_reads_as_the_compact_one():
    compact = decode(datagram([flow_sample(1, 8, 9, 18, HEADER)])).flows[0]
    expanded = decode(datagram([flow_sample(1, 8, 9, 18, HEADER, expanded=True)])).flows[0]
    assert compact == expanded


def test_every_truncation_is_malformed_and_nothing_else():
    raw = datagram([flow_sample(1, 8, 9, 18, HEADER), counter_sample(1, 18, 1, openflow=(1, 3))])
    for cut in range(len(raw)):
        with pytest.raises(Malformed):
            decode(raw[:cut])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (struct.pack("!I", 4) + datagram([])[4:], "version"),
        (datagram([])[:4] + struct.pack("!I", 3) + datagram([])[8:], "address_type"),
        (datagram([])[:-4] + struct.pack("!I", 1_000_000), "sample_count"),
        (datagram([flow_sample(1, 0, 9, 18, HEADER)]), "sampling_rate"),
        (datagram([flow_sample(1, 1 << 25, 9, 18, HEADER)]), "sampling_rate"),
        (datagram([flow_sample(1, 8, 9, 18, HEADER)]) + b"\0\0\0\0", "length"),
    ],
    ids=["version 4", "address type 3", "a million samples", "rate 0", "rate 2^25", "trailing bytes"],
)
def test_each_lie_is_named(raw, reason):
    with pytest.raises(Malformed) as caught:
        decode(raw)
    assert caught.value.reason == reason


def test_an_absurd_record_count_is_refused_before_it_is_looped_over():
    sample = bytearray(flow_sample(1, 8, 9, 18, HEADER))
    struct.pack_into("!I", sample, 8 + 28, 0xFFFFFFFF)  # the flow sample's record count
    with pytest.raises(Malformed) as caught:
        decode(datagram([bytes(sample)]))
    assert caught.value.reason == "record_count"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_raise_anything_but_malformed(raw):
    with contextlib.suppress(Malformed):
        decode(raw)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255))
def test_a_flipped_byte_never_raises_anything_but_malformed(position, value):
    raw = bytearray(datagram([flow_sample(1, 8, 9, 18, HEADER), counter_sample(1, 18, 1, openflow=(1, 3))]))
    raw[position % len(raw)] = value
    with contextlib.suppress(Malformed):
        decode(bytes(raw))


# --- the fold ---------------------------------------------------------------


def bound_fold() -> SflowFold:
    """A fold that has heard ryl0r0's counter samples (the switch and its ifIndexes: port n is ifIndex 10 + n)."""
    fold = SflowFold(FABRIC, AgentPolicy(), FoldConfig())
    dpid = FABRIC.switch(LEAF).dpid
    counters = [counter_sample(1, 10 + p, 0, openflow=(dpid, p)) for p in FABRIC.ports(LEAF)]
    assert fold.accept(decode(datagram(counters, seq=1, uptime_ms=UPTIME - 1000)), 0.0).refused is None
    return fold


def feed(fold: SflowFold, rate: int, per_s: float, seconds: float, start_seq: int = 2, t0: float = 0.0) -> int:
    """A steady flow from SRC, sampled `per_s` times a second at its ingress leaf, one sample a datagram."""
    n = int(per_s * seconds)
    for i in range(n):
        raw = datagram([flow_sample(i, rate, 11, 13, HEADER)], seq=start_seq + i, uptime_ms=UPTIME + 10 * i)
        assert fold.accept(decode(raw), t0 + i / per_s).refused is None
    return start_seq + n


def test_a_steady_flow_is_estimated_within_its_stated_bound():
    fold = bound_fold()
    # 100 samples/s at 1 in 8 of 9018-byte frames: 800 packets/s, seen at its ingress leaf only (1 of 3 hops).
    feed(fold, 8, 100, 2.0)
    flows, _, bounds = fold.records(2.0)
    ((key, record),) = flows
    scale = FABRIC.spec.rates.nic_gbps * 1e9 / (FABRIC.spec.rates.emulated_nic_mbps * 1e6)
    hops = 3
    truth = 800 * 9018 * 8 * scale / hops
    assert key == KEY
    assert record.ingress == Endpoint(LEAF, 3)
    assert abs(record.rate_bps - truth) / truth < 0.05  # a steady stream: the decayed sum is exact up to its steps
    assert bounds[0] == pytest.approx(1.96 / math.sqrt(100 * FoldConfig().tau_s), rel=0.1)


def test_a_mouse_sampled_a_few_times_makes_no_record():
    fold = bound_fold()
    feed(fold, 8, 4, 1.0)  # 4 samples in a second: under min_samples in the decaying window
    assert fold.records(1.0)[0] == []


def test_refusals_change_nothing():
    fold = bound_fold()
    seq = feed(fold, 8, 100, 1.0)
    before = fold.records(1.0)
    foreign = datagram([flow_sample(1, 8, 11, 13, HEADER)], seq=seq, agent="192.0.2.7")
    assert fold.accept(decode(foreign), 1.0).refused == "unknown_agent"
    replay = datagram([flow_sample(1, 1 << 20, 11, 13, HEADER)], seq=5, uptime_ms=UPTIME + 30)
    assert fold.accept(decode(replay), 1.0).refused == "sequence"
    duplicate = datagram([flow_sample(1, 1 << 20, 11, 13, HEADER)], seq=seq - 1, uptime_ms=UPTIME + 10 * seq)
    assert fold.accept(decode(duplicate), 1.0).refused == "sequence"
    assert fold.records(1.0) == before


def test_an_agent_that_restarts_starts_afresh_and_must_name_itself_again():
    fold = bound_fold()
    feed(fold, 8, 100, 1.0)
    restarted = datagram([flow_sample(1, 8, 11, 13, HEADER)], seq=1, uptime_ms=10)
    verdict = fold.accept(decode(restarted), 1.0)
    assert verdict.refused is None and verdict.restarted and verdict.samples == {"unbound": 1}


def test_samples_before_the_agent_names_its_switch_are_refused_as_unbound():
    fold = SflowFold(FABRIC)
    verdict = fold.accept(decode(datagram([flow_sample(1, 8, 11, 13, HEADER)])), 0.0)
    assert verdict.samples == {"unbound": 1} and fold.records(0.0) == ([], [], [])


def test_a_gap_in_the_sequence_is_counted_as_lost_and_accepted():
    fold = bound_fold()
    verdict = fold.accept(decode(datagram([], seq=10, uptime_ms=UPTIME + 2000)), 1.0)
    assert verdict.refused is None and verdict.lost == 8


def test_a_port_rate_comes_from_two_counter_samples_and_is_held_two_intervals():
    fold = bound_fold()
    dpid = FABRIC.switch(LEAF).dpid
    octets = 50e6 / 8  # one second of the emulated 50 Mb/s link, full
    raw = datagram([counter_sample(2, 13, int(octets), openflow=(dpid, 3))], seq=2, uptime_ms=UPTIME)
    fold.accept(decode(raw), 1.0)
    _, ports, _ = fold.records(1.5)
    (egress, sample), *_ = [(e, s) for e, s in ports if e == Endpoint(LEAF, 3)]
    link = FABRIC.link_at(egress)
    assert sample.tx_bps == pytest.approx(link.capacity_bps) and sample.up and sample.observed_at == 1.5
    assert Endpoint(LEAF, 3) not in dict(fold.records(3.5)[1])  # two 1 s intervals without a sample: dropped


def test_a_static_agent_is_named_by_file_and_its_own_ifindexes():
    static = StaticAgent("10.20.0.11", LEAF, {101: 1, 103: 3, 104: 4})
    fold = SflowFold(FABRIC, AgentPolicy((), (static,)))
    raw = [flow_sample(i, 8, 101, 103, HEADER) for i in range(20)]
    assert fold.accept(decode(datagram(raw, agent="10.20.0.11")), 0.0).samples == {"accepted": 20}
    ((key, record),) = fold.records(0.1)[0]
    assert key == KEY and record.ingress == Endpoint(LEAF, 3)


def test_ten_thousand_hostile_datagrams_leave_the_view_as_it_was():
    """Truncated, wrong version, absurd counts, unknown agents, replayed
    sequences: each refused by reason, and the records unchanged."""
    fold = bound_fold()
    seq = feed(fold, 8, 100, 1.0)
    before = fold.records(1.0)
    good = datagram([flow_sample(1, 8, 11, 13, HEADER)], seq=3, uptime_ms=UPTIME + 30)
    rng = random.Random(7)
    reasons: dict[str, int] = {}
    for i in range(10_000):
        kind = i % 5
        if kind == 0:
            raw = good[: rng.randrange(len(good))]
        elif kind == 1:
            raw = struct.pack("!I", rng.choice([0, 2, 4, 6, 0xFFFFFFFF])) + good[4:]
        elif kind == 2:
            raw = good[:24] + struct.pack("!I", rng.randrange(1 << 20, 1 << 32))
        elif kind == 3:
            raw = datagram([flow_sample(1, 8, 11, 13, HEADER)], seq=seq + i, agent=f"198.51.100.{i % 250}")
        else:
            old = rng.randrange(2, seq)  # a datagram the agent sent before, played again
            raw = datagram([flow_sample(1, 1 << 24, 11, 13, HEADER)], seq=old, uptime_ms=UPTIME + 10 * (old - 2))
        try:
            reason = fold.accept(decode(raw), 1.0).refused or "accepted"
        except Malformed as exc:
            reason = exc.reason
        reasons[reason] = reasons.get(reason, 0) + 1
    assert "accepted" not in reasons
    assert reasons["unknown_agent"] == 2000 and reasons["sequence"] == 2000
    assert reasons["version"] == 2000
    # truncated (cut anywhere) and absurd sample counts: each named by what gave it away
    cut = reasons["truncated"] + reasons["length"] + reasons["sample_count"]
    assert cut == 4000 and reasons["sample_count"] >= 2000
    assert fold.records(1.0) == before
