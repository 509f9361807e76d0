"""The daemon's sFlow collector on its real UDP socket, under bad input:
10,000 malformed or hostile datagrams, then a flood of valid ones far above
its bound. Nothing crashes, every refusal is counted by reason, the view the
engine reads is unchanged by the first, and memory stays flat under the
second."""

from __future__ import annotations

import random
import socket
import struct
import time

from controller.fabric import DEFAULT_SPEC, build_fabric, load_spec
from emulation.processes.controller_process import free_port, total
from tests.fakes.sflow import counter_sample, datagram, ethernet_ipv4, flow_sample
from tests.integration.helpers import api_daemon

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))
DPID = FABRIC.switch("ryl0r0").dpid
UPTIME = 3_600_000


def _send(sock, target, raws) -> None:
    for raw in raws:
        sock.sendto(raw, target)


def hostile(seq_now: int, rng: random.Random) -> list[bytes]:
    """Truncated, wrong version, absurd sample counts, unknown agents, replayed sequences: 2,000 each."""
    good = datagram([flow_sample(1, 8, 11, 13, ethernet_ipv4("10.0.0.1", "10.0.1.1"))], seq=2, uptime_ms=UPTIME)
    out = []
    for i in range(10_000):
        kind = i % 5
        if kind == 0:
            out.append(good[: rng.randrange(len(good))])
        elif kind == 1:
            out.append(struct.pack("!I", rng.choice([0, 2, 4, 6, 0xFFFFFFFF])) + good[4:])
        elif kind == 2:
            out.append(good[:24] + struct.pack("!I", rng.randrange(1 << 20, 1 << 32)))
        elif kind == 3:
            out.append(datagram([], seq=seq_now + 1 + i, uptime_ms=UPTIME, agent=f"198.51.100.{i % 250}"))
        else:
            old = rng.randrange(1, seq_now)
            out.append(datagram([flow_sample(1, 1 << 24, 11, 13, good[-64:])], seq=old, uptime_ms=UPTIME + old))
    return out


def refused(samples) -> dict[str, float]:
    return {
        r: total(samples, "railyard_sflow_datagrams_total", result=r)
        for r in ("truncated", "length", "version", "sample_count", "unknown_agent", "sequence")
    }


def test_hostile_datagrams_are_counted_by_reason_and_a_flood_is_refused_with_memory_flat(tmp_path):
    port = free_port(socket.SOCK_DGRAM)
    target = ("127.0.0.1", port)
    with api_daemon(tmp_path, "--sflow-listen", f"127.0.0.1:{port}", "--no-te") as ctl:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # The agent names its switch (ryl0r0) and sends a steady flow: the view before the attack.
        bind = [counter_sample(1, 10 + p, 0, openflow=(DPID, p)) for p in FABRIC.ports("ryl0r0")]
        _send(sock, target, [datagram(bind, seq=1, uptime_ms=UPTIME - 1000)])
        header = ethernet_ipv4("10.0.0.1", "10.0.1.1")
        for seq in range(2, 40):
            _send(sock, target, [datagram([flow_sample(seq, 8, 11, 13, header)], seq=seq, uptime_ms=UPTIME + seq)])
        time.sleep(0.5)
        before = ctl.metrics()
        assert total(before, "railyard_sflow_flows") == 1
        rng = random.Random(32)
        for chunk in range(0, 10_000, 500):  # paced: the attack is judged, not the socket buffer
            _send(sock, target, hostile(40, rng)[chunk : chunk + 500])
            time.sleep(0.05)
        time.sleep(1.0)
        after = ctl.metrics()
        assert ctl.proc is not None and ctl.proc.poll() is None, "the daemon is alive"
        counted = {r: after_n - refused(before)[r] for r, after_n in refused(after).items()}
        print("hostile datagrams refused by reason:", counted)
        assert sum(counted.values()) == 10_000
        assert counted["unknown_agent"] == 2000 and counted["sequence"] == 2000 and counted["version"] == 2000
        accepted = total(after, "railyard_sflow_datagrams_total", result="accepted")
        assert accepted == total(before, "railyard_sflow_datagrams_total", result="accepted")
        assert total(after, "railyard_sflow_flows") == 1  # the engine's view: the one flow, as before

        # Two floods of valid datagrams, each with 8 flows never seen before, 4 s each:
        # the second must not need more memory than the first (bounded queue and flow table).
        seq, sent, rss = 40, 0, []
        for _ in range(2):
            started = time.monotonic()
            while time.monotonic() - started < 4.0:
                raws = []
                for _ in range(200):
                    seq += 1
                    flows = [
                        flow_sample(seq, 8, 11, 13, ethernet_ipv4("10.0.0.1", "10.0.1.1", 17, rng.randrange(1 << 16)))
                        for _ in range(8)
                    ]
                    raws.append(datagram(flows, seq=seq, uptime_ms=UPTIME + seq))
                _send(sock, target, raws)
                sent += len(raws)
            time.sleep(1.0)
            rss.append(total(ctl.metrics(), "process_resident_memory_bytes"))
        flood = ctl.metrics()
        assert ctl.proc.poll() is None
    limited = total(flood, "railyard_sflow_datagrams_total", result="rate_limited")
    full = total(flood, "railyard_sflow_datagrams_total", result="queue_full")
    took = total(flood, "railyard_sflow_datagrams_total", result="accepted") - accepted
    print(f"flood: {sent} sent in 2 x 4 s, {took:.0f} accepted, {limited:.0f} over the rate, {full:.0f} queue full, "
          f"flows {total(flood, 'railyard_sflow_flows'):.0f}, RSS MB {[round(r / 1e6) for r in rss]}")  # fmt: skip
    assert limited + full > 0, "the flood went above the bound"
    assert took <= 20_000 * 10 + 4096  # at most the rate over the floods, plus the queue
    assert rss[1] < rss[0] * 1.05, f"memory grew with the second flood: {rss}"
