"""The transfer engine's accounting, on real sockets over loopback in this
process's own namespace: iterations end with their last byte, compute gaps
run from it, bursts a run ends before reaching count as unfinished, a tiny
UDP burst keeps its header, a job's senders do not hold the run to its
deadline."""

from __future__ import annotations

import math
import os
import time

from emulation.traffic.records import Schedule, Stream
from emulation.traffic.transfers import TransferEngine

HERE = os.getpid()


def stream(port: int, protocol: str = "tcp", size: int = 200_000, windows=(), rate: float = math.inf) -> Stream:
    return Stream(
        f"loopback:{port}", HERE, HERE, "127.0.0.1", "127.0.0.1", protocol, port + 1000, port, rate, size, windows
    )


def test_a_job_iterates_bulk_synchronously_and_ends_before_its_deadline():
    engine = TransferEngine([stream(46101), stream(46102)], [Schedule("j", (0, 1), 3, 0.05, 0.0)], 30.0).open()
    started = time.monotonic()
    engine.start()
    engine.wait(drain_s=0.0)
    assert time.monotonic() - started < 5.0  # not the 30 s deadline: its senders stop with its last iteration
    assert [it.index for it in engine.iterations] == [0, 1, 2]
    ends = [it.end_s if it.end_s is not None else math.nan for it in engine.iterations]
    assert not any(math.isnan(end) for end in ends)
    for end, following in zip(ends, engine.iterations[1:]):
        assert following.start_s >= end + 0.05 - 1e-3  # the gap runs from the last byte
    for result in engine.results:
        assert [b.received for b in result.bursts] == [200_000] * 3
        # An iteration ends with its slowest flow's last byte.
        assert all(b.done is not None and b.done <= end + 1e-9 for b, end in zip(result.bursts, ends))


def test_bursts_past_the_end_count_as_unfinished_and_a_tiny_udp_burst_keeps_its_header():
    # 0.8 s per burst: the second starts late, behind the first, and the run
    # (1 s, 0.2 s of grace) ends inside it; the third is never reached.
    late = stream(46111, size=50_000, windows=((0.0, 0.3), (0.3, 0.6), (0.6, 0.9)), rate=500_000.0)
    tiny = stream(46112, protocol="udp", size=3, windows=((0.0, 0.2), (0.2, 0.4)), rate=1e6)
    engine = TransferEngine([late, tiny], [], 1.0, grace_s=0.2).open().start()
    engine.wait(drain_s=0.2)
    paced, udp = engine.results
    assert [b.released for b in paced.bursts] == [0.0, 0.3, 0.6]
    assert paced.bursts[0].done is not None and paced.bursts[1].done is None
    assert paced.bursts[1].sent is not None and paced.bursts[2].sent is None
    assert [b.received >= 3 and b.done is not None for b in udp.bursts] == [True, True]
    assert not paced.error and not udp.error
