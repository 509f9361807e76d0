"""The baseline Railyard's installs are measured against: OVS's own client
installing the same overlay entries with one `ovs-ofctl --bundle add-flows`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from controller.southbound.overlay import OverlayEntry
from emulation.net import ovs

BRIDGE = "rybench1"
_FIELDS = {"eth_type": "dl_type", "ipv4_src": "nw_src", "ipv4_dst": "nw_dst", "ip_proto": "nw_proto"}


def flow_line(entry: OverlayEntry) -> str:
    match = ",".join(f"{_FIELDS.get(k, k)}={v}" for k, v in entry.match)
    return f"cookie={entry.cookie:#x},priority={entry.priority},{match},actions={','.join(entry.actions)}"


def bundle_install_seconds(entries: Sequence[OverlayEntry], dpid: int, workdir: Path) -> float:
    """Seconds for `ovs-ofctl --bundle add-flows` to install `entries` on a
    fresh bridge (its `dpid`; no controller), which is then removed."""
    ovs.add_bridge(BRIDGE, dpid, None, "bench")
    try:
        flows = workdir / "flows.txt"
        flows.write_text("".join(flow_line(e) + "\n" for e in entries))
        started = time.perf_counter()
        ovs.run(["ovs-ofctl", "-O", "OpenFlow13", "--bundle", "add-flows", BRIDGE, str(flows)], timeout=300)
        elapsed = time.perf_counter() - started
        assert len(ovs.dump_flows(BRIDGE)) == len({e.key for e in entries}), "ovs-ofctl did not install every entry"
        return elapsed
    finally:
        ovs.delete_bridges([BRIDGE])
