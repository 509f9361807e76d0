"""The emulated fabric over OpenFlow TLS: Open vSwitch connects with the
switch certificate of `railyard certs init` to the daemon run with --tls-*.
It reconciles, a `kill -9` restart sends no flow-mod, and a switch whose
certificate does not chain to the CA is refused at the handshake."""

import socket
import ssl
import struct
import time

from controller.security import certs
from emulation.net import ovs
from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports, total
from tests.integration.helpers import client_tls, mutual_tls_args, railyard_entries

LEAF = "ryl0r0"
OFPT_HELLO = struct.pack("!BBHI", 4, 0, 8, 1)


def rogue_switch_is_refused(port: int, pki) -> bool:
    """A TLS client with a certificate from another CA says HELLO; True if the
    controller ends the connection (at the handshake, or right after it)."""
    rogue_ca = certs.new_ca("Rogue CA")
    certs.write(certs.issue(rogue_ca, "switch"), pki, "rogue")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the rogue trusts anything
    context.load_cert_chain(pki / "rogue.crt", pki / "rogue.key")
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw) as conn,
        ):
            conn.sendall(OFPT_HELLO)
            return conn.recv(64) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_the_fabric_over_openflow_tls_reconciles_restarts_with_zero_flow_mods_and_refuses_a_rogue(
    demo_fabric, tmp_path
):
    pki = tmp_path / "pki"
    certs.init_dir(pki)
    (tmp_path / "policy.yaml").write_text("identities:\n  operator: operator\n")
    ports = Ports.pick()
    ctl = ControllerProcess(
        None,
        tmp_path / "intent.db",
        ports,
        tmp_path / "controller.log",
        extra_args=mutual_tls_args(pki, tmp_path / "policy.yaml"),
        tls=client_tls(pki, "operator"),
    )
    switches = len(demo_fabric.switches)
    with EmulatedFabric(demo_fabric, controller=f"tcp:127.0.0.1:{ports.openflow}", tls_dir=pki) as emu:
        assert emu.controller == f"ssl:127.0.0.1:{ports.openflow}"
        assert ovs.ssl_certificate() == str((pki / "switch.crt").resolve())
        ctl.start()
        try:
            ctl.wait_ready(switches)
            with ctl.client() as client:
                client.pin_flow("tls-pin", "10.0.0.1", "10.0.1.1", "rys1", "tcp", 40001, 5301)
            ctl.wait_reconciles(1)
            before = railyard_entries(LEAF)
            assert before, "the pin's entry is not on its leaf"

            ctl.kill()
            ctl.start()
            ctl.wait_ready(switches)
            samples = ctl.wait_reconciles(1)
            assert total(samples, "railyard_flow_mods_total") == 0
            assert railyard_entries(LEAF).keys() == before.keys()

            assert rogue_switch_is_refused(ports.openflow, pki)
            time.sleep(0.5)
            assert total(ctl.metrics(), "railyard_switches_connected") == switches
        finally:
            ctl.stop()
    assert ovs.ssl_certificate() == ""  # the fabric removed its own SSL setting
