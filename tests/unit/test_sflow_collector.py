"""The sFlow collector on a real UDP socket (loopback), in front of the real
fold and ingest: what an agent sends reaches the telemetry view; a
malformed datagram, an unknown agent and a flood past the datagram budget
are counted by reason and reach nothing."""

from __future__ import annotations

import socket
import time

from controller.fabric import DEFAULT_SPEC, NicId, build_fabric, load_spec
from controller.fabric import addressing as ad
from controller.metrics import Metrics
from controller.telemetry.ingest import TelemetryIngest
from controller.telemetry.sflow_collector import SflowCollector
from tests.fakes.sflow import counter_sample, datagram, ethernet_ipv4, flow_sample

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))
SRC, DST = NicId(0, 0, 0), NicId(0, 1, 0)
KEY = (ad.nic_ip(SRC), ad.nic_ip(DST), "tcp", 40000, 5201)
LEAF = FABRIC.attachment(SRC).node
UPTIME = 3_600_000


def counted(metrics: Metrics, result: str) -> float:
    return metrics.sflow_datagrams.labels(result)._value.get()


def wait_for(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_an_agents_datagrams_reach_the_view_and_bad_ones_are_counted_and_go_nowhere():
    metrics = Metrics(sorted(FABRIC.switches))
    ingest = TelemetryIngest(metrics)
    ingest.start()
    collector = SflowCollector(FABRIC, ingest, metrics, "127.0.0.1", 0)
    collector.start()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        send = lambda raw: sender.sendto(raw, collector.address)  # noqa: E731
        dpid = FABRIC.switch(LEAF).dpid
        send(datagram([counter_sample(1, 10 + p, 0, openflow=(dpid, p)) for p in FABRIC.ports(LEAF)], seq=1,
                      uptime_ms=UPTIME - 1000))  # fmt: skip
        send(b"\x00\x00\x00\x02 not sflow")  # a wrong version
        send(datagram([flow_sample(1, 8, 11, 13, ethernet_ipv4(*KEY[:2]))], seq=2, agent="198.51.100.7"))
        header = ethernet_ipv4(ad.nic_ip(SRC), ad.nic_ip(DST))
        for i in range(200):
            send(datagram([flow_sample(i, 1 << 14, 11, 13, header)], seq=3 + i, uptime_ms=UPTIME + 10 * i))
            time.sleep(0.002)
        # Every datagram handled, not only the first with KEY: under load the last ones were still queued.
        wait_for(lambda: KEY in ingest.snapshot()[0] and counted(metrics, "accepted") >= 201)
        assert counted(metrics, "version") == 1
        assert counted(metrics, "unknown_agent") == 1
        assert counted(metrics, "accepted") == 201
        assert set(ingest.snapshot()[0]) == {KEY}  # the unknown agent's flow went nowhere
    finally:
        sender.close()
        collector.stop()
        ingest.stop()


def test_a_flood_past_the_datagram_budget_is_refused_and_counted():
    metrics = Metrics(sorted(FABRIC.switches))
    ingest = TelemetryIngest(metrics)
    collector = SflowCollector(FABRIC, ingest, metrics, "127.0.0.1", 0, max_per_s=50)
    collector.start()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for i in range(500):
            sender.sendto(datagram([], seq=i + 1), collector.address)
        wait_for(lambda: counted(metrics, "rate_limited") + counted(metrics, "accepted") >= 400)
        assert counted(metrics, "rate_limited") >= 300  # at most 50 a second, plus one second's turn
    finally:
        sender.close()
        collector.stop()
