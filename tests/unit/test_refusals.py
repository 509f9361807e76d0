"""Refusals sampled per peer, with an explicit clock; the API-first gate."""

import sys
import threading
import time

from controller.api.refusals import Sampler, Verdict, peer_address
from controller.telemetry.priority import BURST_S, REST_S, SWITCH_S, ApiFirst, short_turns


def test_a_peer_gets_a_few_lines_a_window_and_the_next_line_counts_those_held_back():
    now = [0.0]
    sample = Sampler(per_peer=2, window_s=60, total=100, clock=lambda: now[0])
    assert [sample("a") for _ in range(5)] == [Verdict(True), Verdict(True)] + [Verdict(False)] * 3
    assert sample("b") == Verdict(True)  # another peer has its own
    now[0] = 61.0
    assert sample("a") == Verdict(True, held_back=3)
    assert sample("a") == Verdict(True)


def test_all_peers_together_get_no_more_than_the_total():
    sample = Sampler(per_peer=5, window_s=60, total=3, clock=lambda: 0.0)
    assert [sample(f"peer-{i}").write for i in range(5)] == [True, True, True, False, False]


class Context:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


def test_the_peer_is_its_address_without_the_port():
    assert peer_address(Context("ipv4:10.0.0.7:51234")) == "10.0.0.7"
    assert peer_address(Context("ipv6:[::1]:51234")) == "::1"
    assert peer_address(Context("ipv6:%5B::1%5D:51234")) == "::1"
    assert peer_address(Context("unix:/run/x.sock")) == "unix:/run/x.sock"


def test_background_work_waits_while_an_api_call_runs_and_never_longer_than_its_bound():
    first = ApiFirst(max_wait_s=5.0)
    started = time.monotonic()
    first.yield_to_api()  # nothing running: at once
    assert time.monotonic() - started < 0.05
    entered, waited = threading.Event(), []

    def call() -> None:
        with first.call():
            entered.set()
            time.sleep(0.2)

    thread = threading.Thread(target=call)
    thread.start()
    entered.wait()
    started = time.monotonic()
    first.yield_to_api()
    waited.append(time.monotonic() - started)
    thread.join()
    assert 0.1 < waited[0] < 2.0  # until the call was done
    bounded = ApiFirst(max_wait_s=0.05)
    with bounded.call():
        started = time.monotonic()
        bounded.yield_to_api()
        assert time.monotonic() - started < 0.5  # a call that goes on does not stop the background


def test_a_long_background_job_rests_after_each_burst_of_its_own_cpu_time_and_idle_time_is_not_work():
    first = ApiFirst()
    first.pace()
    time.sleep(3 * BURST_S)  # idle: no CPU spent, so no rest owed
    started = time.perf_counter()
    first.pace()
    assert time.perf_counter() - started < REST_S
    cpu, wall = time.thread_time(), time.perf_counter()
    while time.thread_time() - cpu < 20 * BURST_S:  # the work, in pieces of about a millisecond
        piece = time.thread_time()
        while time.thread_time() - piece < 0.001:
            pass
        first.pace()
    rested = time.perf_counter() - wall - (time.thread_time() - cpu)
    assert rested >= 15 * REST_S  # about one rest per burst (20); a busy machine only adds to it


def test_the_daemon_hands_the_interpreter_lock_over_in_short_turns():
    own = sys.getswitchinterval()
    try:
        short_turns()
        assert sys.getswitchinterval() == SWITCH_S < own
    finally:
        sys.setswitchinterval(own)
