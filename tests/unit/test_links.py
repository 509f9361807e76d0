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


def test_a_queue_per_flow_each_served_in_turn_beside_one_for_everything_else():
    flows = [("tcp", 40001, 5201), ("udp", 40002, 4791)]
    shaped = lines(htb_shaping("ryr0p0s0n0", 20e6, 9000, 12, flows=flows))
    assert shaped[0] == "qdisc replace dev ryr0p0s0n0 root handle 1: htb default 20"  # unmatched: the shared queue
    classes = [line for line in shaped if line.startswith("class replace") and "parent 1:1 " in line]
    assert [c.split("classid ")[1].split()[0] for c in classes] == ["1:20", "1:100", "1:101"]
    # The same guaranteed share and quantum for each, all at one priority, each free to take the NIC.
    assert {c.split("htb ")[1] for c in classes} == {
        "rate 6666666bit ceil 20000000bit burst 18128 cburst 18128 prio 1 quantum 9064"
    }
    # The port's 12 packets of buffer split between its two flows, not 12 each.
    queues = [line.split("parent ")[1] for line in shaped if line.startswith("qdisc replace dev ryr0p0s0n0 parent")]
    assert queues == [
        "1:20 handle 10: pfifo limit 6",
        "1:100 handle 100: pfifo limit 6",
        "1:101 handle 101: pfifo limit 6",
    ]
    filters = [line for line in shaped if line.startswith("filter")]
    assert filters == [
        "filter add dev ryr0p0s0n0 parent 1: protocol ip prio 2 u32 match ip protocol 6 0xff match ip sport 40001 "
        "0xffff match ip dport 5201 0xffff flowid 1:100",
        "filter add dev ryr0p0s0n0 parent 1: protocol ip prio 2 u32 match ip protocol 17 0xff match ip sport 40002 "
        "0xffff match ip dport 4791 0xffff flowid 1:101",
    ]


def test_with_ack_priority_too_the_acks_go_first_and_the_flows_share_the_rest():
    shaped = lines(htb_shaping("x", 20e6, 9000, 12, ack_priority=True, flows=[("tcp", 1, 2)]))
    assert any("classid 1:10 htb rate 1000000bit" in line and line.endswith("prio 0") for line in shaped)
    assert sum("htb rate 9500000bit" in line and line.endswith("prio 1 quantum 9064") for line in shaped) == 2
    assert [line.split(" prio ")[1].split()[0] for line in shaped if line.startswith("filter")] == ["1", "2"]


def test_a_queue_per_flow_keeps_at_least_two_packets_and_one_flow_the_whole_buffer():
    def limits(flows: int) -> set[str]:
        shaped = lines(htb_shaping("x", 20e6, 9000, 12, flows=[("tcp", 40000 + k, 5201) for k in range(flows)]))
        return {line.split("pfifo limit ")[1] for line in shaped if "pfifo limit" in line}

    assert limits(1) == {"12"}
    assert limits(4) == {"3"}
    assert limits(9) == {"2"}
