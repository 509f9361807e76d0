"""ACK streams are not flows: a TCP flow's acknowledgements, the other way
on its reverse 5-tuple, share a NIC pair with any data flow coming back."""

from controller.fabric import NicId
from controller.fabric import addressing as ad
from controller.te.view import FlowSample, reverse_key
from tests.unit.test_engine import FABRIC, engine
from tests.unit.test_engine_trust import elephants_in

A, C = NicId(0, 0, 0), NicId(0, 1, 0)
NIC = FABRIC.spec.rates.nic_gbps * 1e9


def key(src, dst, sport, dport):
    return (ad.nic_ip(src), ad.nic_ip(dst), "tcp", sport, dport)


def sample(src, dst, share):
    return FlowSample(share * NIC, 0, 100.0, FABRIC.egress_path(src, dst, "rys0")[1])


def test_an_ack_stream_is_neither_a_qp_of_the_data_coming_back_nor_a_sender():
    """Hosts that send to each other (Hedera's stride8): a's flow to c and
    c's flow to a, each at most of a NIC; the ACKs of a's flow read 1.2% of
    the NIC, above the sender floor. Counted as a flow they would be a QP
    of c's connection to a, an elephant, and would halve its demand."""
    data = key(A, C, 31081, 5205)
    back = key(C, A, 45790, 5215)
    acks = reverse_key(data)
    flows = {data: sample(A, C, 0.9), back: sample(C, A, 0.9), acks: sample(C, A, 0.012)}
    found = elephants_in(FABRIC, flows)
    assert sorted(found.keys) == sorted([data, back])
    assert found.demand_bps.tolist() == [NIC, NIC]
    without_acks = elephants_in(FABRIC, {data: flows[data], back: flows[back]})
    assert sorted(without_acks.keys) == sorted(found.keys)


def test_the_smaller_way_of_a_two_way_flow_is_still_an_elephant_on_its_own_rate():
    forth = key(A, C, 40000, 5201)
    back = reverse_key(forth)
    found = elephants_in(FABRIC, {forth: sample(A, C, 0.6), back: sample(C, A, 0.2)})
    assert sorted(found.keys) == sorted([forth, back])


def test_a_key_is_paired_with_its_reverse_whichever_is_seen_first():
    catalog = engine(FABRIC).catalog
    forth = key(A, C, 40000, 5201)
    back = reverse_key(forth)
    other = key(C, A, 40001, 5201)
    (f,) = catalog.rows([forth])
    b, o = catalog.rows([back, other])
    assert catalog.reverse[[f, b, o]].tolist() == [b, f, -1]
