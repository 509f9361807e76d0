"""sFlow v5 datagrams built byte by byte (XDR), as an agent sends them: for
the decoder's and the collector's tests, and for the hostile-input ones."""

from __future__ import annotations

import ipaddress
import struct


def _opaque(fmt: int, body: bytes) -> bytes:
    return struct.pack("!II", fmt, len(body)) + body + bytes(-len(body) % 4)


def ethernet_ipv4(src: str, dst: str, protocol: int = 6, sport: int = 40000, dport: int = 5201) -> bytes:
    eth = bytes(6) + bytes(6) + struct.pack("!H", 0x0800)
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 9000, 0, 0, 64, protocol, 0,
        ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed,
    )  # fmt: skip
    return eth + ip + struct.pack("!HH", sport, dport) + bytes(16)


def flow_sample(
    seq: int, rate: int, input_if: int, output_if: int, header: bytes, frame_length: int = 9018, expanded: bool = False
) -> bytes:
    raw = _opaque(1, struct.pack("!IIII", 1, frame_length, 4, len(header)) + header + bytes(-len(header) % 4))
    if expanded:
        body = struct.pack("!IIIIIIIIIII", seq, 0, 0, rate, seq * rate, 0, 0, input_if, 0, output_if, 1) + raw
        return _opaque(3, body)
    body = struct.pack("!IIIIIIII", seq, 0, rate, seq * rate, 0, input_if, output_if, 1) + raw
    return _opaque(1, body)


def counter_sample(
    seq: int, if_index: int, out_octets: int, up: bool = True, openflow: tuple[int, int] | None = None
) -> bytes:
    generic = struct.pack(
        "!IIQIIQIIIIIIQIIIIII", if_index, 6, 10**9, 1, 3 if up else 1, 0, 0, 0, 0, 0, 0, 0, out_octets,
        0, 0, 0, 7, 0, 0,
    )  # fmt: skip
    records = [_opaque(1, generic)]
    if openflow is not None:
        records.append(_opaque(1004, struct.pack("!QI", *openflow)))
    return _opaque(2, struct.pack("!III", seq, if_index, len(records)) + b"".join(records))


def datagram(
    samples: list[bytes], seq: int = 1, uptime_ms: int = 1000, agent: str = "127.0.0.1", sub: int = 0
) -> bytes:
    header = struct.pack("!II4sIII", 5, 1, ipaddress.IPv4Address(agent).packed, sub, seq, uptime_ms)
    return header + struct.pack("!I", len(samples)) + b"".join(samples)
