"""Helpers shared by the integration tests: reading switches and counters,
and running the daemon on its own (with mutual TLS, if asked)."""

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

from controller.api.client import ClientTls
from controller.fabric import Endpoint, Fabric
from controller.intent.drains import DrainTarget
from emulation.net import ovs
from emulation.net.fabric import EmulatedFabric
from emulation.net.ovs import PortStats
from emulation.processes.controller_process import ControllerProcess, Ports
from emulation.traffic.counters import counter_delta, port_counters

SPINE_OF_UPLINK = {3: "rys0", 4: "rys1"}  # demo fabric: leaf port S+1+j faces spine j (S = 2 servers)


def railyard_entries(switch: str) -> dict[str, dict]:
    """Railyard-cookie entries on a switch: match text -> {cookie, duration_s, actions}."""
    found = {}
    for line in ovs.dump_flows(switch):
        cookie_field = re.search(r"cookie=(0x[0-9a-f]+)", line)
        assert cookie_field is not None, line
        cookie = int(cookie_field.group(1), 16)
        if cookie >> 48 != 0x5259:
            continue
        match_field = re.search(r"priority=\d+,(\S+) actions=", line)
        duration_field = re.search(r"duration=([\d.]+)s", line)
        assert match_field is not None and duration_field is not None, line
        match = match_field.group(1)
        found[match] = {
            "cookie": cookie,
            "duration_s": float(duration_field.group(1)),
            "actions": line.split("actions=")[1],
        }
    return found


def uplink_bytes(before, after, leaf: str) -> dict[int, int]:
    delta = counter_delta(before, after)
    return {port: delta[Endpoint(leaf, port)].tx_bytes for port in SPINE_OF_UPLINK}


def window(fabric, seconds=2.0) -> tuple[dict[Endpoint, PortStats], dict[Endpoint, PortStats]]:
    """Port counters at the start and end of a measurement window."""
    before = port_counters(fabric)
    time.sleep(seconds)
    return before, port_counters(fabric)


@contextlib.contextmanager
def fabric_with_daemon(
    fabric: Fabric, spec: Path | None, workdir: Path
) -> Iterator[tuple[EmulatedFabric, ControllerProcess]]:
    """`fabric` on real Open vSwitch with the controller daemon attached (a
    child process of `spec`, None for the default, on a fresh store in `workdir`)."""
    ovs.check_running()
    ports = Ports.pick()
    ctl = ControllerProcess(spec, workdir / "intent.db", ports, workdir / "controller.log", reconcile_interval_s=1.0)
    with EmulatedFabric(fabric, controller=ports.controller_target) as emu:
        ctl.start()
        try:
            ctl.wait_ready(len(fabric.switches))
            yield emu, ctl
        finally:
            ctl.stop()


def emptied(ctl: ControllerProcess) -> None:
    """The daemon's intent emptied again and reconciled (after a test, even one
    that failed half-way)."""
    with ctl.client() as client:
        clear_intent(client)
    ctl.wait_reconciles(1)


def clear_intent(client) -> None:
    """Releases every job, removes every pin, undrains everything."""
    for job in client.list_jobs():
        client.release_job(job.job_id)
    for pin in client.list_pins():
        client.unpin_flow(pin.name)
    for switch in client.get_fabric().switches:
        if switch.drained:
            client.drain(DrainTarget.SWITCH, switch.name, drained=False)
    for link in client.list_links(include_access=True):
        if link.drained:
            client.drain(DrainTarget.LINK, link.name, drained=False)


@contextlib.contextmanager
def api_daemon(workdir: Path, *args: str, tls: ClientTls | None = None) -> Iterator[ControllerProcess]:
    """The real daemon with no fabric attached (placement answers once intent
    is loaded), `args` added to its command line, until the block ends."""
    ctl = ControllerProcess(
        None, workdir / "intent.db", Ports.pick(), workdir / "controller.log", extra_args=args, tls=tls
    ).start()
    try:
        ctl.wait_serving_api()
        yield ctl
    finally:
        ctl.stop()


def mutual_tls_args(pki: Path, policy: Path) -> tuple[str, ...]:
    """`railyard controller run` options for mutual TLS with a `railyard certs init` directory."""
    return (
        *("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key")),
        *("--tls-ca", str(pki / "ca.crt"), "--policy", str(policy)),
    )


def client_tls(pki: Path, who: str) -> ClientTls:
    """`who`'s certificate (e.g. scheduler, operator) from a `railyard certs init` directory."""
    return ClientTls.from_files(pki / "ca.crt", pki / f"{who}.crt", pki / f"{who}.key")
