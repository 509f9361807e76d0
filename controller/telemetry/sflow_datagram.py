"""sFlow version 5 datagrams, decoded. Pure: bytes in, data out.

sFlow v5 (sflow.org, sflow_version_5.txt) is XDR: big-endian, every item
padded to four bytes, every opaque structure prefixed by its length. What
Railyard reads of it:

- the datagram header: agent address, sub-agent, sequence number, uptime;
- flow samples (format 1, and expanded, format 3): sampling rate, input and
  output interface, and the sampled packet's header (flow record 1), from
  which the 5-tuple comes;
- counter samples (formats 2 and 4): generic interface counters (record 1:
  octets out, discards, oper status) and, from an OpenFlow switch, the
  OpenFlow port an ifIndex is (record 1004, sFlow OpenFlow structures:
  datapath id and port number), which is how an Open vSwitch agent names
  its ports.

Anything else (other enterprises, other record formats) is skipped by its
length, as the specification asks of a collector. Every length and count is
checked against what the datagram still holds before it is trusted: a
truncated or lying datagram raises `Malformed` with the reason (a bounded
label), and nothing of it is used.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from controller.errors import RailyardError

VERSION = 5

# Malformed reasons: metric labels, so a fixed set.
REASONS = ("truncated", "version", "address_type", "sample_count", "record_count", "length", "sampling_rate")

_U32 = struct.Struct("!I")
_HEADER_TAIL = struct.Struct("!IIII")  # sub-agent, sequence, uptime (ms), number of samples
_FLOW_SAMPLE = struct.Struct("!IIIIIIII")  # seq, source, rate, pool, drops, input, output, records
# seq, source type, source index, rate, pool, drops, input (format, value), output (format, value), records
_FLOW_SAMPLE_EXPANDED = struct.Struct("!IIIIIIIIIII")
_COUNTER_SAMPLE = struct.Struct("!III")  # seq, source, records
_COUNTER_SAMPLE_EXPANDED = struct.Struct("!IIII")  # seq, src type, src index, records
_RAW_HEADER = struct.Struct("!IIII")  # protocol, frame length, stripped, header length
_GENERIC_COUNTERS = struct.Struct("!IIQIIQIIIIIIQIIIIII")  # if_counters, 88 bytes
_OPENFLOW_PORT = struct.Struct("!QI")  # of_port: datapath id, port number

HEADER_ETHERNET = 1
# The output interface's format bits (flow sample, 32-bit form): 0 one
# ifIndex, 1 discarded (the low bits a reason), 2 several interfaces.
OUTPUT_SINGLE, OUTPUT_DISCARDED, OUTPUT_MULTIPLE = 0, 1, 2
MAX_SAMPLING_RATE = 1 << 24  # no agent samples sparser than 1 in 16M; beyond is a lie that would scale to nonsense


class Malformed(RailyardError):
    """A datagram that is not sFlow v5 as specified. `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class FlowSample:
    sequence: int
    source_index: int
    sampling_rate: int
    input_if: int  # ifIndex; 0: unknown (e.g. the packet came from the switch itself)
    output_if: int  # ifIndex of a single output; 0 when discarded, several or unknown
    frame_length: int  # the sampled packet's length on the wire
    header: bytes  # its first bytes, from the Ethernet header on; b"" if not sampled as Ethernet


@dataclass(frozen=True)
class PortCounters:
    if_index: int
    speed_bps: int
    oper_up: bool
    out_octets: int
    out_discards: int
    openflow: tuple[int, int] | None  # (datapath id, port number), when the agent says


@dataclass(frozen=True)
class CounterSample:
    sequence: int
    source_index: int
    ports: tuple[PortCounters, ...]


@dataclass(frozen=True)
class Datagram:
    agent: str  # the agent address, as text
    sub_agent: int
    sequence: int
    uptime_ms: int
    flows: tuple[FlowSample, ...]
    counters: tuple[CounterSample, ...]


class _Reader:
    """A cursor over one XDR buffer that refuses to read past its end."""

    def __init__(self, buf: bytes | memoryview, start: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.at = start
        self.end = len(buf) if end is None else end

    def left(self) -> int:
        return self.end - self.at

    def take(self, n: int, what: str) -> int:
        if n < 0 or n > self.left():
            raise Malformed("truncated", f"{what} needs {n} bytes, {self.left()} left")
        at = self.at
        self.at += n
        return at

    def unpack(self, fmt: struct.Struct, what: str) -> tuple:
        return fmt.unpack_from(self.buf, self.take(fmt.size, what))

    def u32(self, what: str) -> int:
        return _U32.unpack_from(self.buf, self.take(4, what))[0]

    def opaque(self, what: str) -> _Reader:
        """A length-prefixed structure: a reader over its body (this one moves past it, padding included)."""
        length = self.u32(what)
        if length > self.left():
            raise Malformed("length", f"{what} claims {length} bytes, {self.left()} left")
        at = self.take(length, what)
        self.take(-length % 4 if -length % 4 <= self.left() else 0, what)
        return _Reader(self.buf, at, at + length)

    def count(self, what: str, reason: str, smallest: int) -> int:
        """A count of items each at least `smallest` bytes: more than fit is a lie."""
        n = self.u32(what)
        if n * smallest > self.left():
            raise Malformed(reason, f"{what} of {n} cannot fit in {self.left()} bytes")
        return n


def decode(buf: bytes | memoryview) -> Datagram:
    """One datagram. Raises Malformed, never anything else, on any input."""
    r = _Reader(buf)
    version = r.u32("version")
    if version != VERSION:
        raise Malformed("version", f"version {version}, not {VERSION}")
    address_type = r.u32("agent address type")
    if address_type == 1:
        agent = str(ipaddress.IPv4Address(bytes(buf[r.take(4, "agent address") :][:4])))
    elif address_type == 2:
        agent = str(ipaddress.IPv6Address(bytes(buf[r.take(16, "agent address") :][:16])))
    else:
        raise Malformed("address_type", f"agent address type {address_type}, not 1 (IPv4) or 2 (IPv6)")
    sub_agent, sequence, uptime, n = r.unpack(_HEADER_TAIL, "datagram header")
    if n * 8 > r.left():
        raise Malformed("sample_count", f"{n} samples cannot fit in {r.left()} bytes")
    flows: list[FlowSample] = []
    counters: list[CounterSample] = []
    for _ in range(n):
        fmt = r.u32("sample format")
        body = r.opaque("sample")
        if fmt >> 12:
            continue  # another enterprise's sample: skipped by its length
        if fmt in (1, 3):
            flows.append(_flow_sample(body, expanded=fmt == 3))
        elif fmt in (2, 4):
            counters.append(_counter_sample(body, expanded=fmt == 4))
    if r.left():
        raise Malformed("length", f"{r.left()} bytes after the last of {n} samples")
    return Datagram(agent, sub_agent, sequence, uptime, tuple(flows), tuple(counters))


def _interface(value: int) -> int:
    """A flow sample's output interface: the ifIndex of a single output, else 0."""
    return value & 0x3FFFFFFF if value >> 30 == OUTPUT_SINGLE else 0


def _flow_sample(r: _Reader, expanded: bool) -> FlowSample:
    if expanded:
        seq, _, index, rate, _, _, in_format, in_value, out_format, out_value, _ = r.unpack(
            _FLOW_SAMPLE_EXPANDED, "expanded flow sample"
        )
        r.at -= 4  # the record count is read below
        input_if = in_value if in_format == 0 else 0
        output_if = out_value if out_format == 0 else 0
    else:
        seq, source, rate, _, _, input_raw, output_raw, _ = r.unpack(_FLOW_SAMPLE, "flow sample")
        r.at -= 4
        index = source & 0xFFFFFF
        input_if = input_raw & 0x3FFFFFFF if input_raw >> 30 == OUTPUT_SINGLE else 0
        output_if = _interface(output_raw)
    if not 1 <= rate <= MAX_SAMPLING_RATE:
        raise Malformed("sampling_rate", f"sampling rate {rate}, not 1 to {MAX_SAMPLING_RATE}")
    frame_length, header = 0, b""
    for _ in range(r.count("flow records", "record_count", 8)):
        fmt = r.u32("flow record format")
        body = r.opaque("flow record")
        if fmt == 1:
            protocol, frame_length, _, length = body.unpack(_RAW_HEADER, "raw packet header")
            if length > body.left():
                raise Malformed("length", f"sampled header claims {length} bytes, {body.left()} left")
            at = body.take(length, "sampled header")
            if protocol == HEADER_ETHERNET:
                header = bytes(body.buf[at : at + length])
    if r.left():
        raise Malformed("length", f"{r.left()} bytes after a flow sample's records")
    return FlowSample(seq, index, rate, input_if, output_if, frame_length, header)


def _counter_sample(r: _Reader, expanded: bool) -> CounterSample:
    if expanded:
        seq, _, index, _ = r.unpack(_COUNTER_SAMPLE_EXPANDED, "expanded counter sample")
    else:
        seq, source, _ = r.unpack(_COUNTER_SAMPLE, "counter sample")
        index = source & 0xFFFFFF
    r.at -= 4
    generic: tuple | None = None
    openflow: tuple[int, int] | None = None
    for _ in range(r.count("counter records", "record_count", 8)):
        fmt = r.u32("counter record format")
        body = r.opaque("counter record")
        if fmt == 1:
            generic = body.unpack(_GENERIC_COUNTERS, "generic interface counters")
        elif fmt == 1004:
            openflow = body.unpack(_OPENFLOW_PORT, "OpenFlow port")
    if r.left():
        raise Malformed("length", f"{r.left()} bytes after a counter sample's records")
    ports: tuple[PortCounters, ...] = ()
    if generic is not None:
        if_index, _, speed, _, status = generic[:5]
        out_octets, out_discards = generic[12], generic[16]
        ports = (PortCounters(if_index, speed, bool(status & 2), out_octets, out_discards, openflow),)
    return CounterSample(seq, index, ports)


@dataclass(frozen=True)
class Headers:
    """What a sampled Ethernet header says of the packet."""

    src: str
    dst: str
    protocol: str  # "tcp", "udp" or "" (another IP protocol, or ports cut off)
    src_port: int
    dst_port: int


_ETHERTYPE_IPV4 = 0x0800
_VLAN_TAGS = (0x8100, 0x88A8)


def parse_headers(header: bytes) -> Headers | None:
    """The IPv4 5-tuple of a sampled Ethernet header (VLAN tags skipped);
    None if it is not IPv4 or too short to say. A first fragment's ports are
    read; a later fragment has none (protocol "")."""
    at = 12
    while len(header) >= at + 2 and int.from_bytes(header[at : at + 2], "big") in _VLAN_TAGS:
        at += 4
    if len(header) < at + 2 + 20 or int.from_bytes(header[at : at + 2], "big") != _ETHERTYPE_IPV4:
        return None
    ip = at + 2
    if header[ip] >> 4 != 4:
        return None
    ihl = (header[ip] & 0xF) * 4
    src = str(ipaddress.IPv4Address(header[ip + 12 : ip + 16]))
    dst = str(ipaddress.IPv4Address(header[ip + 16 : ip + 20]))
    proto = header[ip + 9]
    fragment_offset = int.from_bytes(header[ip + 6 : ip + 8], "big") & 0x1FFF
    l4 = ip + ihl
    name = {6: "tcp", 17: "udp"}.get(proto, "")
    if not name or fragment_offset or ihl < 20 or len(header) < l4 + 4:
        return Headers(src, dst, "", 0, 0)
    ports = int.from_bytes(header[l4 : l4 + 2], "big"), int.from_bytes(header[l4 + 2 : l4 + 4], "big")
    return Headers(src, dst, name, *ports)
