"""Interchangeable spines, merged for the LP. Pure.

On a two-tier fabric (every path: source leaf -> via -> destination leaf),
two vias with the same live links to the same leaves, at the same
capacities, are interchangeable: swapping them maps every constraint onto
itself. Averaging an optimal allocation over such swaps keeps it feasible
and keeps every rate, so some max-min optimum sends each commodity evenly
over a class of interchangeable vias. The LP then needs one path per class,
over "class links" (leaf -> class, class -> leaf) of the members' summed
capacity. Exact, and on a healthy per-rail plane of 32 spines it divides
the LP's path variables by 32; a failed uplink only splits its spine off.

Fabrics with longer paths (fat trees) keep one LP path per real path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulation.model.network import Network


@dataclass(frozen=True, eq=False)
class LpPaths:
    commodity: np.ndarray  # per LP path
    links: tuple[np.ndarray, ...]  # per LP path: LP link indices (real ones first, class links after)
    members: tuple[np.ndarray, ...]  # per LP path: the real paths (in commodity order) it stands for
    link_cap: np.ndarray  # per LP link, normalised
    n_real_paths: int


def lp_paths(net: Network) -> LpPaths:
    real = _real(net)
    classes = via_classes(net)
    if classes is None:
        return _unmerged(net, real)
    size: dict[int, int] = {}
    for cls in classes.values():
        size[cls] = size.get(cls, 0) + 1
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (c, via, path) in enumerate(real):
        # A commodity inside one leaf has one path and no hops: a group of its own.
        groups.setdefault((c, classes[via] if len(path) else -1 - i), []).append(i)
    if any(cls >= 0 and len(paths) != size[cls] for (_, cls), paths in groups.items()):
        return _unmerged(net, real)  # a commodity that sees part of a class: no such fabric, but stay exact
    extra: dict[tuple[str, int, str], int] = {}  # (side, class, leaf) -> class link
    caps: list[float] = []
    commodity, links, members = [], [], []
    for (c, cls), paths in groups.items():
        k = net.commodities[c]
        ids = []
        if cls < 0:
            commodity.append(c)
            links.append(real[paths[0]][2])
            members.append(np.array(paths, dtype=np.int64))
            continue
        for key, hop in ((("up", cls, k.src_leaf), 0), (("down", cls, k.dst_leaf), 1)):
            j = extra.get(key)
            if j is None:
                j = extra[key] = len(net.links) + len(caps)
                caps.append(float(sum(net.link_cap[int(real[q][2][hop])] for q in paths)))
            ids.append(j)
        commodity.append(c)
        links.append(np.array(ids, dtype=np.int64))
        members.append(np.array(paths, dtype=np.int64))
    return LpPaths(
        np.array(commodity, dtype=np.int64),
        tuple(links),
        tuple(members),
        np.concatenate([net.link_cap, caps]),
        len(real),
    )


def _unmerged(net: Network, real: list[tuple[int, str, np.ndarray]]) -> LpPaths:
    return LpPaths(
        np.array([c for c, _, _ in real], dtype=np.int64),
        tuple(p for _, _, p in real),
        tuple(np.array([i]) for i in range(len(real))),
        net.link_cap,
        len(real),
    )


def _real(net: Network) -> list[tuple[int, str, np.ndarray]]:
    """(commodity, via, switch hops) of every live path, in commodity order."""
    return [(c, k.vias[i], p) for c, k in enumerate(net.commodities) for i, p in enumerate(k.paths)]


def via_classes(net: Network) -> dict[str, int] | None:
    """Via -> class, the vias of a class interchangeable (same live links to
    the same leaves at the same capacities); None unless every path with
    hops is leaf -> via -> leaf."""
    real = _real(net)
    up: dict[str, dict[str, float]] = {}
    down: dict[str, dict[str, float]] = {}
    for c, via, path in real:
        commodity = net.commodities[c]
        if not len(path):
            continue
        if len(path) != 2 or not via:
            return None
        first, second = net.links[int(path[0])], net.links[int(path[1])]
        if first.node != commodity.src_leaf or second.node != via:
            return None
        up.setdefault(via, {})[commodity.src_leaf] = float(net.link_cap[int(path[0])])
        down.setdefault(via, {})[commodity.dst_leaf] = float(net.link_cap[int(path[1])])
    profiles: dict[tuple, int] = {}
    return {
        via: profiles.setdefault((tuple(sorted(up[via].items())), tuple(sorted(down[via].items()))), len(profiles))
        for via in sorted(up)
    }
