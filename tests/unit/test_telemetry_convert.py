"""What the telemetry API makes of agents' records: unknown NICs rejected,
clocks that run ahead clamped, so no agent can pin a link's load."""

from google.protobuf.timestamp_pb2 import Timestamp

from controller.api.gen.railyard.v1 import common_pb2, telemetry_pb2
from controller.api.telemetry import MAX_CLOCK_SKEW_S, convert
from controller.fabric import Endpoint, load_fabric
from controller.te.view import LinkView
from controller.telemetry.ingest import FORGET_AFTER_S

FABRIC = load_fabric()  # 2 pods x 2 servers x 2 rails
NOW = 1_800_000_000.0
HOUR = 3600.0


def at(t: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(t * 1e9))
    return stamp


def batch(tx_bps: float, when: float, src: str = "10.0.0.1", dst: str = "10.0.1.1") -> telemetry_pb2.TelemetryBatch:
    return telemetry_pb2.TelemetryBatch(
        hops=[telemetry_pb2.HopRecord(switch="ryl0r0", egress_port=3, tx_bps=tx_bps, observe_time=at(when))],
        flows=[
            telemetry_pb2.FlowRecord(
                src_address=src, dst_address=dst, protocol=common_pb2.PROTOCOL_TCP, src_port=1, dst_port=2,
                rate_bps=tx_bps, observe_time=at(when),
            )
        ],
    )  # fmt: skip


def test_records_for_nics_the_fabric_does_not_have_are_rejected():
    # 10.0.5.1 is a well-formed address (pod 5) on a fabric of 2 pods.
    converted = convert(FABRIC, batch(1e9, NOW, dst="10.0.5.1"), NOW)
    assert converted.rejected == 1 and converted.batch.flows == ()
    assert len(converted.batch.ports) == 1


def test_an_agent_clock_an_hour_ahead_neither_hides_honest_samples_nor_outlives_the_forget_horizon():
    view = LinkView()
    uplink = Endpoint("ryl0r0", 3)
    poisoned = convert(FABRIC, batch(400e9, NOW + HOUR), NOW)
    assert poisoned.clamped == 2
    for egress, sample in poisoned.batch.ports:
        view.observe_port(egress, sample)
    assert view.ports[uplink].observed_at == NOW + MAX_CLOCK_SKEW_S
    # An honest agent's sample 2 s later is newer, and wins.
    honest = convert(FABRIC, batch(10e9, NOW + 2), NOW + 2)
    assert honest.clamped == 0
    for egress, sample in honest.batch.ports:
        view.observe_port(egress, sample)
    assert view.ports[uplink].observed_at == NOW + 2
    # And a poisoned sample alone is forgotten on the arrival clock, not its own.
    alone = LinkView()
    for egress, sample in poisoned.batch.ports:
        alone.observe_port(egress, sample)
    a_minute_later = NOW + MAX_CLOCK_SKEW_S + FORGET_AFTER_S + 1
    alone.forget_before(a_minute_later - FORGET_AFTER_S)  # as the ingest's sweep does
    assert uplink not in alone.ports


def test_a_flow_records_ports_must_be_the_fabrics_and_name_the_switches_it_reports_for():
    from controller.api.telemetry import reported_switches

    def record(**where):
        msg = batch(1e9, NOW)
        for key, value in where.items():
            setattr(msg.flows[0], key, value)
        return msg

    kept = convert(
        FABRIC, record(ingress_leaf="ryl0r0", ingress_egress_port=3, transit_switch="rys0", transit_egress_port=2), NOW
    )
    ((_, sample),) = kept.batch.flows
    assert (sample.ingress, sample.transit) == (Endpoint("ryl0r0", 3), Endpoint("rys0", 2))
    for bad in (
        {"transit_switch": "rys9", "transit_egress_port": 2},
        {"transit_switch": "rys0", "transit_egress_port": 99},
    ):
        refused = convert(FABRIC, record(ingress_leaf="ryl0r0", ingress_egress_port=3, **bad), NOW)
        assert refused.rejected == 1 and refused.batch.flows == ()
    # An agent is held to its own switches for every switch a record names.
    assert reported_switches(record(transit_switch="rys1", transit_egress_port=2)) == {"ryl0r0", "rys1"}
