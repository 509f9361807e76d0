"""The C heap's trim: freed memory goes back to the system (glibc, as Debian has)."""

from __future__ import annotations

import threading
import time

from controller.runtime import heap


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _fragment() -> list[bytearray]:
    """~62 MiB freed between live blocks on a thread's own arena: 64 KiB
    blocks (under malloc's mmap threshold), every other one kept. free()
    gives memory back only from the top of the main arena, so it stays."""
    kept: list[bytearray] = []

    def allocate() -> None:
        blocks = [bytearray(b"x" * 65536) for _ in range(2000)]
        kept.extend(blocks[::2])

    worker = threading.Thread(target=allocate)
    worker.start()
    worker.join()
    return kept


def test_the_daemons_trimmer_gives_back_the_pages_of_blocks_freed_between_live_ones_then_stops():
    kept = _fragment()
    before = _rss_kib()
    stop = threading.Event()
    assert heap.tune(stop, every_s=0.05)
    (trimmer,) = [t for t in threading.enumerate() if t.name == "heap-trim" and t.is_alive()]
    deadline = time.monotonic() + 5
    while before - _rss_kib() < 32 * 1024 and time.monotonic() < deadline:
        time.sleep(0.05)
    released = before - _rss_kib()
    stop.set()
    trimmer.join(timeout=2)
    assert released >= 32 * 1024, f"{released} KiB given back"
    assert not trimmer.is_alive()
    assert len(kept) == 1000  # the live blocks stay


def test_after_tuning_a_block_of_a_few_mib_gets_its_own_mapping_even_after_a_bigger_one_was_freed():
    """glibc by default raises its mmap threshold to the size of each mapped
    block freed: after an 8 MiB block is freed, a 2 MiB one would come from
    an arena and leave a hole there when freed."""
    stop = threading.Event()
    assert heap.tune(stop, every_s=60)
    big = bytearray(8 << 20)
    del big
    before = heap.usage()
    block = bytearray(2 << 20)
    after = heap.usage()
    del block
    stop.set()
    assert before is not None and after is not None
    assert after.mapped_blocks - before.mapped_blocks == 1
    assert after.in_use - before.in_use >= 2 << 20


def _exported() -> dict[str, float]:
    (family,) = heap.HeapCollector().collect()
    return {sample.labels["state"]: sample.value for sample in family.samples}


def test_the_exported_bytes_follow_what_malloc_hands_out():
    before = _exported()
    block = bytearray(4 << 20)
    grown = _exported()["in_use"] - before["in_use"]
    del block
    assert grown >= 4 << 20
    assert before["free"] >= 0
