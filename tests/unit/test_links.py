"""The egress queue's tc commands (emulation/net/links.py)."""

from emulation.net.links import htb_shaping


def lines(commands: list[list[str]]) -> list[str]:
    assert all(c[0] == "tc" for c in commands)
    return [" ".join(c[1:]) for c in commands]


def test_one_class_over_one_bounded_fifo_by_default():
    assert lines(htb_shaping("ryl0r0-eth3", 20e6, 9000, 12)) == [
        "qdisc replace dev ryl0r0-eth3 root handle 1: htb default 1",
        "class replace dev ryl0r0-eth3 parent 1: classid 1:1 htb rate 20000000bit ceil 20000000bit burst 18128 "
        "cburst 18128",
        "qdisc replace dev ryl0r0-eth3 parent 1:1 handle 10: pfifo limit 12",
    ]


def test_with_ack_priority_small_packets_leave_first_and_the_link_rate_still_caps_both():
    shaped = lines(htb_shaping("ryl0r0-eth3", 20e6, 9000, 12, ack_priority=True))
    assert shaped[0] == "qdisc replace dev ryl0r0-eth3 root handle 1: htb default 20"  # data, unless filtered
    assert "classid 1:1 htb rate 20000000bit ceil 20000000bit" in shaped[1]
    acks, data = shaped[2], shaped[3]
    assert "parent 1:1 classid 1:10 htb rate 1000000bit ceil 20000000bit" in acks and acks.endswith("prio 0")
    assert "parent 1:1 classid 1:20 htb rate 19000000bit ceil 20000000bit" in data and data.endswith("prio 1")
    assert "parent 1:20 handle 10: pfifo limit 12" in shaped[4]  # the data queue keeps its handle
    assert "parent 1:10 handle 11: pfifo limit 12" in shaped[5]
    # IPv4 total length (low 16 bits of the first header word) below 128 bytes: pure ACKs, not 9000-byte frames.
    assert shaped[6].endswith("protocol ip prio 1 u32 match u32 0 0xff80 at 0 flowid 1:10")
