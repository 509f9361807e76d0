"""Where TCP's ACKs go, in the fluid model: each TCP flow's reversed
5-tuple, hashed by the far leaf's select group or steered by an overlay
entry, so a flow whose ACKs cross a dead link stalls as it does in the
fabric. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import NicId
from controller.te.jobs import pinned_vias
from controller.te.view import reverse_key
from emulation.simulate.routes import Network, Routes, build_routes, ecmp_routes, tier_hashes


@dataclass(frozen=True)
class AckRoutes:
    """Each TCP flow's ACK stream: the reversed 5-tuple between the same two
    NICs, routed like any packet (the underlay hashes it at the destination's
    leaf, unless an overlay entry steers that direction). A TCP flow whose
    ACKs cross a dead link stalls however its data is routed: the emulated
    link-failure scenario shows it when a leaf's surviving uplink carries the
    data and the far leaf hashes the ACKs towards the dead one. ACKs' own
    bandwidth is left out (a few percent of a link at most)."""

    routes: Routes  # per flow, the reversed pair's candidate routes, indexed like the flows
    hashes: np.ndarray  # of the reversed 5-tuples, per tier (tier_hashes)
    tcp: np.ndarray  # per flow: it has ACKs
    reverse_flow: np.ndarray  # per flow: the flow whose 5-tuple is its reverse, -1 if none

    def stalled(self, capacity: np.ndarray, steer_via: Sequence[str]) -> np.ndarray:
        """Per flow: its ACKs cross a dead link. `steer_via`: per flow, the
        via an overlay entry sends its ACKs across ("" where the underlay
        hashes them)."""
        if not self.tcp.any() or bool((capacity > 0).all()):
            return np.zeros(len(self.tcp), dtype=bool)
        route = ecmp_routes(self.routes, self.hashes, self.routes.ingress_usable(capacity))
        for i, via in enumerate(steer_via):
            if via:
                route[i] = self.routes.by_via[i].get(via, route[i])
        return self.tcp & ~self.routes.route_usable(capacity)[route]


def ack_routes(network: Network, keys: Sequence[tuple], pairs: Sequence[tuple[NicId, NicId]]) -> AckRoutes:
    reversed_keys = [reverse_key(key) for key in keys]
    index = {key: i for i, key in enumerate(keys)}
    return AckRoutes(
        build_routes(network, [(dst, src) for src, dst in pairs]),
        tier_hashes(reversed_keys),
        np.fromiter((key[2] == "tcp" for key in keys), dtype=bool, count=len(keys)),
        np.fromiter((index.get(key, -1) for key in reversed_keys), dtype=np.int64, count=len(keys)),
    )


def ack_steering(
    flows_via: Sequence[str], pairs: Sequence[tuple[NicId, NicId]], moved_via: Mapping[int, str], acks: AckRoutes
) -> list[str]:
    """Per flow, the via an overlay entry sends its ACKs across ("": hashed):
    the reverse flow's own TE move if it has one; else this flow's move (the
    overlay steers a moved TCP flow's ACKs back the same way, te_entries);
    else a placed job's pair entry for the reversed NIC pair (a QP's entry
    matches its own source port, which no ACK carries). `flows_via`: each
    flow's job steering; `moved_via`: flow index -> via of its TE move."""
    job_via = pinned_vias((src, dst, via) for (src, dst), via in zip(pairs, flows_via))
    out = []
    for i, (src, dst) in enumerate(pairs):
        j = int(acks.reverse_flow[i])
        if j >= 0 and j in moved_via:
            out.append(moved_via[j])
        elif i in moved_via:
            out.append(moved_via[i])
        else:
            out.append(job_via.get((dst, src), ""))
    return out
