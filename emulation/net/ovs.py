"""Thin wrappers over ovs-vsctl / ovs-ofctl / ovs-appctl. All OVS I/O lives here."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from controller.errors import HostError

# A Railyard bridge carries this external_id; cleanup never touches a bridge without it.
FABRIC_ID_KEY = "railyard-fabric"


class OvsError(HostError):
    pass


def run(args: list[str], *, check: bool = True, timeout: float = 30.0) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise OvsError(f"{args[0]} not found: install Open vSwitch (make setup)") from exc
    if check and proc.returncode != 0:
        raise OvsError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def check_running() -> None:
    """Raise a clear error when ovsdb-server / ovs-vswitchd are not up."""
    try:
        run(["ovs-vsctl", "-t", "3", "show"], timeout=5)
    except (OvsError, subprocess.TimeoutExpired) as exc:
        raise OvsError(
            "Open vSwitch is not running (ovs-vsctl show failed); `make setup` starts "
            f"ovsdb-server and ovs-vswitchd: {exc}"
        ) from exc
    sndbuf = vswitchd_packet_sndbuf()
    if sndbuf is not None and sndbuf < MIN_PACKET_SNDBUF:
        raise OvsError(
            f"ovs-vswitchd's packet socket has a {sndbuf}-byte send buffer (need {MIN_PACKET_SNDBUF}): "
            "one congested port would drop traffic on every port; `make setup` fixes it"
        )
    dp_types = run(["ovs-vsctl", "get", "Open_vSwitch", ".", "datapath_types"])
    if "netdev" not in dp_types:
        raise OvsError(f"ovs-vswitchd lacks the userspace (netdev) datapath: {dp_types.strip()}")


# See deploy/host-setup.sh: the userspace datapath's single AF_PACKET send
# socket must hold every port's queue at once, or one full queue drops all.
MIN_PACKET_SNDBUF = 16 * 1024 * 1024


def vswitchd_packet_sndbuf() -> int | None:
    """Send-buffer size of ovs-vswitchd's AF_PACKET socket (None before it has sent anything)."""
    out = run(["ss", "-0", "-m", "-p"], check=False)
    for line in out.splitlines():
        if "ovs-vswitchd" in line and (m := re.search(r"\btb(\d+)", line)):
            return int(m.group(1))
    return None


def railyard_bridges() -> dict[str, str]:
    """Bridge name -> fabric name, for bridges Railyard created (and only those)."""
    out = run(["ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "Bridge"])
    bridges = {}
    for name, external_ids in json.loads(out)["data"]:
        ids = dict(external_ids[1])
        if FABRIC_ID_KEY in ids:
            bridges[name] = ids[FABRIC_ID_KEY]
    return bridges


def all_bridges() -> list[str]:
    return run(["ovs-vsctl", "list-br"]).split()


def delete_bridges(names: list[str]) -> None:
    if names:
        args = ["ovs-vsctl"]
        for name in names:
            args += ["--", "--if-exists", "del-br", name]
        run(args)


def add_bridge(name: str, dpid: int, controller: str | None, owner: str) -> None:
    """A bare userspace bridge outside any emulated fabric (benchmarks,
    tests), marked as `owner`'s so that only its owner removes it."""
    run(
        [
            "ovs-vsctl",
            "--may-exist",
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
            "fail_mode=secure",
            "protocols=OpenFlow13",
            f"other_config:datapath-id={dpid:016x}",
            f"external_ids:{FABRIC_ID_KEY}={owner}",
        ]
    )
    if controller:
        run(["ovs-vsctl", "set-controller", name, controller])


def add_groups_and_flows(bridge: str, groups: list[str], flows: list[str]) -> None:
    # selection_method=hash is an OF1.5 group property; flows go in over OF1.3.
    with tempfile.TemporaryDirectory() as tmp:
        if groups:
            path = Path(tmp, "groups")
            path.write_text("\n".join(groups) + "\n")
            run(["ovs-ofctl", "-O", "OpenFlow15", "add-groups", bridge, str(path)])
        if flows:
            path = Path(tmp, "flows")
            path.write_text("\n".join(flows) + "\n")
            run(["ovs-ofctl", "-O", "OpenFlow13", "add-flows", bridge, str(path)])


def dump_flows(bridge: str) -> list[str]:
    out = run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge])
    return [line.strip() for line in out.splitlines() if "actions=" in line]


def dump_groups(bridge: str) -> list[str]:
    out = run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", bridge])
    return [line.strip() for line in out.splitlines() if "group_id=" in line]


_METER_STATS = re.compile(r"meter:(\d+) .*?bands:\s*\n((?:\s*\d+: packet_count:\d+ byte_count:\d+\s*\n?)*)")


def meter_band_packets(bridge: str) -> dict[int, int]:
    """meter id -> packets its bands dropped, for every meter of the bridge."""
    out = run(["ovs-ofctl", "-O", "OpenFlow13", "meter-stats", bridge])
    return {
        int(m.group(1)): sum(int(n) for n in re.findall(r"packet_count:(\d+)", m.group(2)))
        for m in _METER_STATS.finditer(out)
    }


_PORT_STATS = re.compile(
    r"port\s+(\w+):\s+rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?\n\s+tx pkts=(\d+), bytes=(\d+), drop=(\d+)"
)


@dataclass(frozen=True)
class PortStats:
    rx_packets: int
    rx_bytes: int
    rx_dropped: int
    tx_packets: int
    tx_bytes: int
    tx_dropped: int

    def __sub__(self, other: PortStats) -> PortStats:
        return PortStats(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


def port_stats(bridge: str) -> dict[int, PortStats]:
    """Live OpenFlow port counters of one bridge (ovsdb's copy lags by up to 5 s)."""
    out = run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", bridge])
    stats = {}
    for m in _PORT_STATS.finditer(out):
        if m.group(1).isdigit():
            stats[int(m.group(1))] = PortStats(*(int(g) for g in m.groups()[1:]))
    return stats


def interface_ofports() -> dict[str, int]:
    """OpenFlow port number of every OVS interface (-1 while unassigned), in one ovsdb round trip."""
    out = run(["ovs-vsctl", "--format=json", "--columns=name,ofport", "list", "Interface"])
    return {name: ofport if isinstance(ofport, int) else -1 for name, ofport in json.loads(out)["data"]}


_OUTPUT = re.compile(r"^\s*output:(\d+)\s*$")


def trace_output_port(bridge: str, flow: str) -> int | None:
    """The OpenFlow port a packet described by `flow` would leave `bridge` on.

    ofproto/trace runs the real pipeline, including the select group's hash,
    so this is the switch's own ECMP decision, not a re-implementation of it.
    """
    out = run(["ovs-appctl", "ofproto/trace", bridge, flow])
    ports = [int(m.group(1)) for line in out.splitlines() if (m := _OUTPUT.match(line))]
    return ports[-1] if ports else None


def ssl_certificate() -> str:
    """The certificate Open vSwitch's SSL configuration names ("" if none).
    It is one per OVS instance, shared by every bridge's ssl: targets."""
    for line in run(["ovs-vsctl", "get-ssl"]).splitlines():
        label, _, value = line.partition(":")
        if label.strip() == "Certificate":
            return value.strip()
    return ""


def set_ssl(key: Path, cert: Path, ca: Path) -> None:
    run(["ovs-vsctl", "set-ssl", str(key), str(cert), str(ca)])


def del_ssl_if(cert: Path | str) -> None:
    """Removes OVS's SSL configuration if it is still the one naming `cert`
    (ours): another owner's is left alone."""
    if ssl_certificate() == str(cert):
        run(["ovs-vsctl", "del-ssl"])


@dataclass(frozen=True)
class SflowExport:
    """Open vSwitch's own sFlow agent on a bridge: where it sends, 1 in
    `sampling` packets sampled (their first `header` bytes), port counters
    every `polling` seconds, reported as agent address `agent`."""

    target: str  # HOST:PORT of the collector
    sampling: int
    polling: int = 1
    header: int = 64
    agent: str = "127.0.0.1"


def set_sflow(bridges: list[str], export: SflowExport) -> None:
    """One sFlow record, shared by `bridges` (each is its own sub-agent and
    names itself by datapath id in its counter samples)."""
    if not bridges:
        return
    args = [
        "ovs-vsctl",
        "--",
        "--id=@s",
        "create",
        "sflow",
        f"agent={export.agent}",
        f'targets="{export.target}"',
        f"header={export.header}",
        f"sampling={export.sampling}",
        f"polling={export.polling}",
    ]
    for bridge in bridges:
        args += ["--", "set", "bridge", bridge, "sflow=@s"]
    run(args)
