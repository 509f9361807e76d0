"""The emulated fabric: Mininet hosts and OVS userspace-datapath switches built from a Fabric.

Lifetime is the owning process's: `EmulatedFabric` is a context manager, and
`railyard fabric up` keeps one alive until SIGINT/SIGTERM. A state file under
/run/railyard records what was created so `railyard fabric down`, from any
process, removes exactly that and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from controller.errors import HostError
from controller.fabric import Fabric, NicId
from controller.fabric import addressing as ad
from controller.fabric.spec import NicArbitration
from emulation.net import links, netns, ovs
from emulation.net.underlay import build_underlay

LOG = logging.getLogger(__name__)
STATE_DIR = Path(os.environ.get("RAILYARD_STATE_DIR", "/run/railyard"))


def state_path(fabric_name: str, state_dir: Path = STATE_DIR) -> Path:
    return state_dir / f"fabric-{fabric_name}.json"


def _mininet():
    # Imported lazily: the Debian package is importable only inside the
    # project venv (system site-packages), and the pure model never needs it.
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch, RemoteController

    setLogLevel(os.environ.get("RAILYARD_MININET_LOG", "error"))

    class RailyardSwitch(OVSSwitch):
        """OVS userspace bridge, OF1.3 (+1.5 for hash groups), fail_mode=secure, tagged as ours."""

        def __init__(self, name, fabric_name="", **params):
            self.fabric_name = fabric_name
            super().__init__(
                name,
                failMode="secure",
                datapath="user",
                protocols="OpenFlow13,OpenFlow15",
                batch=True,
                **params,
            )

        def bridgeOpts(self):
            return super().bridgeOpts() + f" external_ids:{ovs.FABRIC_ID_KEY}={self.fabric_name}"

    return Mininet, RemoteController, RailyardSwitch


# No slow start after idle: RoCE does not restart slowly after a pause, where
# Linux TCP would at every iteration of a job, after its compute gap. (The
# congestion control is set per socket: emulation/traffic/iperf.py.)
HOST_SYSCTLS = (
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.tcp_slow_start_after_idle=0",
)
# The retransmission timeout's floor on every route a server has (Linux's is
# 200 ms, a WAN's): RoCE fabrics do not drop (PFC), and a flow that loses its
# last segments at a 12-packet queue should not sit out a fifth of a second.
# Set per route, as datacenters set it, since the sysctl for it needs Linux
# 6.11. Measured on training-planes: iterations about a point nearer the
# optimum; Hedera's randx and randbij1 the same or higher (docs/benchmarks.md).
RTO_MIN = "rto_min 10ms"


# Samples a second of one flow at line rate, at each switch. sFlow's rule
# for large-flow detection, 1 in the link's speed in Mb/s, gives 30 at RoCE's
# 4 KB frames on any link (100G: 1 in 100,000; 400G: 1 in 400,000); the
# emulation's jumbo frames at a few tens of Mb/s carry a few hundred packets
# a second, so its rate is set from its own packet rate to give as many.
# (100 a second cost the userspace datapath, which handles each sample in
# its forwarding thread, 3-10 % of its goodput on two busy cores: the demo's
# seed 2 carried 77.6 % of the optimum with no move against 86.9 % on the
# agent; at 30 it detects a collision within 0.2 s, docs/real-fabrics.md.)
SFLOW_SAMPLES_PER_S = 30


def sflow_sampling(fabric: Fabric) -> int:
    """1-in-N for the emulated NIC rate and MTU: SFLOW_SAMPLES_PER_S of a flow at line rate."""
    emulation = fabric.spec.emulation
    packets_per_s = fabric.spec.rates.emulated_nic_mbps * 1e6 / 8 / (emulation.mtu + 14)
    return max(1, round(packets_per_s / SFLOW_SAMPLES_PER_S))


class EmulatedFabric:
    def __init__(
        self,
        fabric: Fabric,
        controller: str | None = None,
        state_dir: Path = STATE_DIR,
        tls_dir: Path | None = None,
        bare: bool = False,
        sflow: ovs.SflowExport | None = None,
    ) -> None:
        self.fabric = fabric
        # Bare: no underlay installed here; the controller (--underlay) installs it.
        self.bare = bare
        self.sflow = sflow  # Open vSwitch's own sFlow agent on every bridge, exporting there
        self.controller = controller or fabric.spec.emulation.controller
        # With `tls_dir` (from `railyard certs init`), the switches connect over
        # TLS with its switch certificate: an ssl: target, and OVS's SSL set.
        self.tls_dir = tls_dir.resolve() if tls_dir is not None else None
        # A comma-separated list: every switch connects to each (controller replicas).
        if self.tls_dir is not None:
            self.controller = ",".join(
                "ssl:" + t[len("tcp:") :] if t.startswith("tcp:") else t for t in self.controller.split(",")
            )
        self.state_file = state_path(fabric.spec.name, state_dir)
        self.net = None
        self.host_pids: dict[str, int] = {}
        self.netns_inodes: set[int] = set()
        self._arbitrated: set[NicId] = set()  # NICs with a queue per flow (arbitrate)
        self._arbitrated_into: set[NicId] = set()  # NICs whose leaf egress has one

    # --- lifecycle ---------------------------------------------------------
    def __enter__(self) -> EmulatedFabric:
        from emulation.net.cleanup import sigterm_unwinds

        with contextlib.ExitStack() as unwinding:
            unwinding.enter_context(sigterm_unwinds())
            self.start()
            self._unwinding = unwinding.pop_all()  # held until __exit__
        return self

    def __exit__(self, *exc) -> None:
        with self._unwinding:
            self.stop()

    def start(self) -> None:
        from emulation.net.cleanup import owner_gone, teardown_from_state

        ovs.check_running()
        if self.state_file.exists() and owner_gone(self.state_file):
            # What it created is ours and orphaned: swept as `railyard fabric down` would.
            LOG.warning("fabric %s was left up by a process that is gone: tearing it down", self.fabric.spec.name)
            teardown_from_state(self.state_file)
        if self.state_file.exists():
            raise HostError(
                f"fabric {self.fabric.spec.name!r} is already up (state file {self.state_file}); "
                "run `railyard fabric down` first"
            )
        clash = set(ovs.all_bridges()) & set(self.fabric.switches)
        if clash:
            raise HostError(f"bridges {sorted(clash)} already exist; run `railyard fabric down` first")
        started = time.monotonic()
        if self.tls_dir is not None:
            current = ovs.ssl_certificate()
            if current and current != str(self.tls_dir / "switch.crt"):
                raise HostError(
                    f"Open vSwitch's SSL is already configured (certificate {current}), and it is one per "
                    "instance: remove it (ovs-vsctl del-ssl) or run the fabric without TLS"
                )
        try:
            if self.tls_dir is not None:
                ovs.set_ssl(self.tls_dir / "switch.key", self.tls_dir / "switch.crt", self.tls_dir / "ca.crt")
            self._build()
            self._write_state()
            self._configure_switch_ports()
            self._configure_hosts()
            self._wait_ports_attached()
            if not self.bare:
                self._install_underlay()
            if self.sflow is not None:
                ovs.set_sflow(sorted(self.fabric.switches), self.sflow)
        except BaseException:
            self.stop()
            raise
        LOG.info("fabric %s up in %.1f s", self.fabric.spec.name, time.monotonic() - started)

    def stop(self) -> None:
        from emulation.net.cleanup import kill_namespace_processes, teardown

        # Traffic and agents first, so Mininet's own shutdown finds only its shells.
        kill_namespace_processes(self.netns_inodes, spare=set(self.host_pids.values()))
        if self.net is not None:
            try:
                self.net.stop()
            except Exception as exc:  # keep going: teardown() below sweeps what is left
                LOG.warning("mininet stop failed: %s", exc)
            # A RemoteController's stop does nothing, so its shell outlived the
            # fabric: 154 of them in one run of bench.hedera, one per fabric built.
            for controller in self.net.controllers:
                controller.terminate()
            self.net = None
        teardown(self.fabric, netns_inodes=self.netns_inodes)
        if self.tls_dir is not None:
            ovs.del_ssl_if(self.tls_dir / "switch.crt")
        self.state_file.unlink(missing_ok=True)
        self.host_pids = {}
        self.netns_inodes = set()

    # --- access ------------------------------------------------------------
    def pid_of(self, nic: NicId) -> int:
        return self.host_pids[ad.server_name(nic.pod, nic.server)]

    def popen(self, nic: NicId, args: list[str], **kwargs):
        return netns.popen(self.pid_of(nic), args, **kwargs)

    def run(self, nic: NicId, args: list[str], **kwargs) -> str:
        return netns.run(self.pid_of(nic), args, **kwargs)

    def arbitrate(self, flows: Iterable[tuple[NicId, NicId, links.FlowPorts]]) -> None:
        """Before a run's traffic, the access links' queues as the spec's
        arbitration asks, from the run's flows (source NIC, destination NIC,
        ports). With `nic_arbitration: per-flow` each NIC the flows leave gets
        a queue per flow, served in turn (links.htb_shaping); with
        `receiver_arbitration: per-flow` so does the leaf's egress into each
        NIC the flows reach. An access link that had a run's flows before and
        has none now gets its one queue back. A no-op where both are `fifo`."""
        emulation = self.fabric.spec.emulation
        flows = list(flows)
        if emulation.nic_arbitration is NicArbitration.PER_FLOW:
            leaving = _grouped((src, ports) for src, _, ports in flows)
            self._arbitrated = self._queue_per_flow(leaving, self._arbitrated, self._nic_egress)
        if emulation.receiver_arbitration is NicArbitration.PER_FLOW:
            arriving = _grouped((dst, ports) for _, dst, ports in flows)
            self._arbitrated_into = self._queue_per_flow(arriving, self._arbitrated_into, self._leaf_egress)

    def _queue_per_flow(
        self,
        flows: dict[NicId, list[links.FlowPorts]],
        before: set[NicId],
        egress: Callable[[NicId], tuple[int | None, str]],
    ) -> set[NicId]:
        """Each NIC's access-link direction (`egress`: the namespace and
        interface it leaves by) rebuilt with a queue per flow in `flows`, and
        those in `before` without flows now with one queue again."""
        batches: dict[int | None, list[str]] = {}
        for nic in sorted(before | set(flows)):
            pid, intf = egress(nic)
            rate = self.fabric.access_link(nic).emulated_bps
            # Built afresh: a replaced root keeps its classes and filters.
            lines = [f"qdisc del dev {intf} root", *self._shaping(intf, rate, flows.get(nic, ()))]
            batches.setdefault(pid, []).extend(lines)
        for pid, lines in batches.items():
            netns.run_batch(pid, "tc", lines)
        return set(flows)

    def _nic_egress(self, nic: NicId) -> tuple[int | None, str]:
        return self.pid_of(nic), ad.nic_name(nic)

    def _leaf_egress(self, nic: NicId) -> tuple[int | None, str]:
        port = self.fabric.attachment(nic)
        return None, ad.switch_port_name(port.node, port.port)

    # --- steps -------------------------------------------------------------
    def _build(self) -> None:
        Mininet, RemoteController, RailyardSwitch = _mininet()
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False)
        for index, target in enumerate(self.controller.split(",")):
            proto, ip, port = target.split(":")
            net.addController(RemoteController(f"c{index}", ip=ip, port=int(port), protocol=proto))
        nodes = {}
        for switch in self.fabric.switches.values():
            nodes[switch.name] = net.addSwitch(
                switch.name, cls=RailyardSwitch, dpid=ad.dpid_hex(switch.dpid), fabric_name=self.fabric.spec.name
            )
        for server in self.fabric.servers:
            nodes[server.name] = net.addHost(server.name, ip=None)
        nic_server = {ad.nic_name(n): ad.server_name(n.pod, n.server) for n in self.fabric.nics}
        nic_by_name = {ad.nic_name(n): n for n in self.fabric.nics}
        for link in self.fabric.links:
            a, b = link.a, link.b
            if b.port == 0:
                a, b = b, a
            if a.port == 0:  # access link: NIC <-> leaf port
                nic = nic_by_name[a.node]
                net.addLink(
                    nodes[nic_server[a.node]],
                    nodes[b.node],
                    port1=nic.rail,
                    port2=b.port,
                    intfName1=a.node,
                    intfName2=ad.switch_port_name(b.node, b.port),
                    addr1=ad.nic_mac(nic),
                )
            else:
                net.addLink(
                    nodes[a.node],
                    nodes[b.node],
                    port1=a.port,
                    port2=b.port,
                    intfName1=ad.switch_port_name(a.node, a.port),
                    intfName2=ad.switch_port_name(b.node, b.port),
                )
        self.net = net
        net.build()
        self.host_pids = {h.name: h.pid for h in net.hosts}
        self.netns_inodes = {i for pid in self.host_pids.values() if (i := netns.netns_inode(pid)) is not None}
        net.start()

    def _write_state(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "fabric": self.fabric.spec.name,
            "pid": os.getpid(),
            "hosts": self.host_pids,
            "netns_inodes": sorted(self.netns_inodes),
            "bridges": sorted(self.fabric.switches),
            "controller": self.controller,
            "ssl_certificate": str(self.tls_dir / "switch.crt") if self.tls_dir is not None else "",
            "started_unix": time.time(),
        }
        self.state_file.write_text(json.dumps(state, indent=2))

    def _shaping(self, intf: str, rate_bps: float, flows: Sequence[links.FlowPorts] = ()) -> list[str]:
        """`tc -batch` lines shaping one interface's egress as the spec says."""
        emulation = self.fabric.spec.emulation
        shaping = links.htb_shaping(
            intf, rate_bps, emulation.mtu, emulation.queue_packets, emulation.ack_priority, flows
        )
        return [" ".join(c[1:]) for c in shaping]

    def _configure_switch_ports(self) -> None:
        mtu = self.fabric.spec.emulation.mtu
        ip_lines, tc_lines = [], []
        for name in self.fabric.switches:
            for port, link in self.fabric.ports(name).items():
                intf = ad.switch_port_name(name, port)
                ip_lines.append(" ".join(links.ip_link_up(intf, mtu)[1:]))
                tc_lines += self._shaping(intf, link.emulated_bps)
                netns.run(None, links.ethtool_offloads_off(intf))
        netns.run_batch(None, "ip", ip_lines)
        netns.run_batch(None, "tc", tc_lines)

    def _configure_hosts(self) -> None:
        """Addresses, routes, static neighbours, shaping; and the TCP the
        emulated servers run, the same on every host (HOST_SYSCTLS, RTO_MIN)."""
        mtu = self.fabric.spec.emulation.mtu
        by_prefix: dict[tuple[int, int], list[NicId]] = {}
        for nic in self.fabric.nics:
            by_prefix.setdefault((nic.rail, nic.pod), []).append(nic)
        for server in self.fabric.servers:
            pid = self.host_pids[server.name]
            netns.run(pid, ["sysctl", "-qw", *HOST_SYSCTLS])
            ip_lines, tc_lines = [], []
            for nic in server.nics:
                intf = ad.nic_name(nic)
                netns.run(pid, links.ethtool_offloads_off(intf))
                gateway = ad.gateway_address(nic.rail, nic.pod)
                ip_lines += [
                    " ".join(links.ip_link_up(intf, mtu)[1:]),
                    f"addr flush dev {intf}",
                    f"addr add {ad.nic_address(nic)}/24 dev {intf}",
                    f"route replace {ad.leaf_prefix(nic.rail, nic.pod)} dev {intf} proto kernel scope link"
                    f" src {ad.nic_address(nic)} {RTO_MIN}",
                    *(
                        f"route replace {prefix} via {gateway} dev {intf} {RTO_MIN}"
                        for prefix in ad.rail_prefixes(nic.rail, self.fabric.spec.pods)
                    ),
                    f"neigh replace {gateway} lladdr {ad.gateway_mac(nic.rail, nic.pod)} dev {intf} nud permanent",
                ]
                # Static neighbours: the fabric is routed, so nothing answers ARP.
                ip_lines += [
                    f"neigh replace {ad.nic_address(peer)} lladdr {ad.nic_mac(peer)} dev {intf} nud permanent"
                    for peer in by_prefix[(nic.rail, nic.pod)]
                    if peer != nic
                ]
                tc_lines += self._shaping(intf, self.fabric.access_link(nic).emulated_bps)
            netns.run_batch(pid, "ip", ip_lines)
            netns.run_batch(pid, "tc", tc_lines)

    def _wait_ports_attached(self, timeout: float = 30.0) -> None:
        wanted = {
            ad.switch_port_name(name, port): port for name in self.fabric.switches for port in self.fabric.ports(name)
        }
        deadline = time.monotonic() + timeout
        while True:
            ofports = ovs.interface_ofports()
            missing = [n for n, p in wanted.items() if ofports.get(n) != p]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"OVS did not attach {len(missing)} ports, e.g. {missing[:3]}")
            time.sleep(0.2)

    def _install_underlay(self) -> None:
        for name, table in build_underlay(self.fabric).items():
            ovs.add_groups_and_flows(name, [g.ofctl() for g in table.groups], [f.ofctl() for f in table.flows])


def _grouped(flows: Iterable[tuple[NicId, links.FlowPorts]]) -> dict[NicId, list[links.FlowPorts]]:
    grouped: dict[NicId, list[links.FlowPorts]] = {}
    for nic, ports in flows:
        grouped.setdefault(nic, []).append(ports)
    return grouped
