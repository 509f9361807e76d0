"""Open vSwitch 3.1's bucket choice for a `select` group with
`selection_method=hash,fields(ip_src,ip_dst,ip_proto,tcp_src,tcp_dst,udp_src,udp_dst)`,
vectorised over flows. Pure numpy.

The underlay's select groups (emulation/net/underlay.py SelectGroup) are
that kind of group, so with this the simulator routes every flow across the
bucket the emulated switch picks, not merely with the same spread: a
simulated and an emulated run of one seed can be compared flow by flow.

What OVS does (ofproto/ofproto-dpif-xlate.c, v3.1.0):

- pick_hash_fields_select_group: basis = hash_uint64(selection_method_param)
  (0 here); then, for each listed field in meta-flow id order whose
  prerequisites the packet meets, basis = hash_bytes(value, n_bytes, basis),
  the value in network byte order as the flow struct stores it. The order is
  ip_src, ip_dst, ip_proto, then tcp_src, tcp_dst (TCP only) or udp_src,
  udp_dst (UDP only): any other protocol hashes no ports.
- group_best_live_bucket: over the buckets in list order, skipping dead ones
  (a watch_port that is down), score = (hash_int(bucket_id, basis) & 0xffff)
  * weight; `score >= best` keeps the later bucket on a tie. No live bucket:
  the packet is dropped.

The hash primitives are lib/hash.h's murmur3-based ("mhash") ones. hash.h
compiles CRC32-C variants instead when built with __SSE4_2__ on x86-64, but
Debian builds for the x86-64 baseline (no SSE4.2), and ofproto/trace's
per-bucket scores on Debian 12's openvswitch-switch 3.1.0 match these and not
the CRC32-C ones (tests/integration/test_ovs_select_hash.py checks it).

Every function takes and returns numpy uint32 arrays (any broadcastable
shapes) and wraps modulo 2**32 as C's uint32_t does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_U32 = np.uint32

TCP = 6
UDP = 17


def _rotl(x: np.ndarray, k: int) -> np.ndarray:
    return (x << _U32(k)) | (x >> _U32(32 - k))


def hash_add(hash_: npt.ArrayLike, data: npt.ArrayLike) -> np.ndarray:
    """mhash_add: one 32-bit word into the running hash. (hash.h skips the
    mixing step for a zero word; mixing zero gives zero, so no branch is needed.)"""
    with np.errstate(over="ignore"):
        data = _rotl(np.asarray(data, dtype=_U32) * _U32(0xCC9E2D51), 15) * _U32(0x1B873593)
        return _rotl(np.asarray(hash_, dtype=_U32) ^ data, 13) * _U32(5) + _U32(0xE6546B64)


def hash_finish(hash_: npt.ArrayLike, final: int) -> np.ndarray:
    """hash_finish = mhash_finish(hash ^ final): murmur3's fmix32."""
    with np.errstate(over="ignore"):
        h = np.asarray(hash_, dtype=_U32) ^ _U32(final)
        h = (h ^ (h >> _U32(16))) * _U32(0x85EBCA6B)
        h = (h ^ (h >> _U32(13))) * _U32(0xC2B2AE35)
        return h ^ (h >> _U32(16))


def hash_bytes_word(word: npt.ArrayLike, n_bytes: int, basis: npt.ArrayLike) -> np.ndarray:
    """hash_bytes of a field of at most 4 bytes. hash_bytes reads the bytes as
    one native (little-endian on x86-64) word, zero-padded, so `word` is that
    load: a field's bytes in memory order, first byte least significant."""
    assert 0 < n_bytes <= 4
    return hash_finish(hash_add(basis, word), n_bytes)


def hash_uint64(x: int) -> np.uint32:
    """hash_uint64 (basis 0): the two halves, low first, then finish with 8."""
    h = hash_add(hash_add(_U32(0), _U32(x & 0xFFFFFFFF)), _U32(x >> 32))
    return _U32(hash_finish(h, 8))


def hash_int(x: npt.ArrayLike, basis: npt.ArrayLike) -> np.ndarray:
    """hash_int(x, basis) = hash_2words(x, basis)."""
    return hash_finish(hash_add(hash_add(x, _U32(0)), basis), 8)


def _wire16(value: npt.ArrayLike) -> np.ndarray:
    """A be16 field (a port) as hash_bytes loads it: its two bytes swapped into the low half."""
    v = np.asarray(value, dtype=_U32) & _U32(0xFFFF)
    return (v >> _U32(8)) | ((v & _U32(0xFF)) << _U32(8))


def _wire32(value: npt.ArrayLike) -> np.ndarray:
    """A be32 field (an IPv4 address) as hash_bytes loads it: byte-swapped."""
    return np.asarray(value, dtype=_U32).byteswap()


def select_hash(
    src_ip: npt.ArrayLike,
    dst_ip: npt.ArrayLike,
    proto: npt.ArrayLike,
    sport: npt.ArrayLike,
    dport: npt.ArrayLike,
    param: int = 0,
) -> np.ndarray:
    """Per flow, the basis group_best_live_bucket scores buckets with. Inputs
    are plain integers (addresses as ipaddress's int(), ports and protocol
    numbers as written), one per flow; `param` is selection_method_param."""
    h = np.broadcast_to(hash_uint64(param), np.shape(src_ip))
    h = hash_bytes_word(_wire32(src_ip), 4, h)
    h = hash_bytes_word(_wire32(dst_ip), 4, h)
    proto = np.asarray(proto, dtype=_U32)
    h = hash_bytes_word(proto, 1, h)
    # tcp_* need ip_proto 6 and udp_* 17; both pairs sit at the same place in
    # meta-flow id order, so a TCP and a UDP flow hash their ports alike.
    with_ports = hash_bytes_word(_wire16(dport), 2, hash_bytes_word(_wire16(sport), 2, h))
    return np.where((proto == _U32(TCP)) | (proto == _U32(UDP)), with_ports, h)


def bucket_scores(hash_: npt.ArrayLike, bucket_id: npt.ArrayLike) -> np.ndarray:
    """(hash_int(bucket_id, basis) & 0xffff): a bucket's score before the
    weight. ovs-ofctl gives every select bucket weight 1 unless told otherwise
    (the underlay never says), and equal weights do not change the order."""
    return hash_int(bucket_id, hash_) & _U32(0xFFFF)


def best_bucket(hash_: npt.ArrayLike, n_buckets: int, live: npt.ArrayLike | None = None) -> np.ndarray:
    """Per flow, the index of the bucket OVS picks from a group of
    `n_buckets` buckets with ids 0..n-1 in that order (SelectGroup.ofctl);
    `live` (n_buckets, or flows x n_buckets) marks the buckets whose watch
    port is up. -1 where no bucket is live (OVS drops the packet)."""
    hash_ = np.asarray(hash_, dtype=_U32)
    score = bucket_scores(hash_[:, None], np.arange(n_buckets, dtype=_U32)[None, :]).astype(np.int64)
    if live is not None:
        score = np.where(np.broadcast_to(live, score.shape), score, -1)
    # `>=`: the last of the best scores wins, so take argmax from the end.
    best = n_buckets - 1 - np.argmax(score[:, ::-1], axis=1)
    return np.where(score.max(axis=1, initial=-1) >= 0, best, -1)
