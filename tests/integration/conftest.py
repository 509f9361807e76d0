"""Integration fixtures: a real emulated fabric on real Open vSwitch.

These tests need root, Open vSwitch running and Mininet: `make test` (and so
CI) provides all three. Without root they are skipped with the reason shown.
"""

import os

import pytest

from controller.fabric import DEFAULT_SPEC, build_fabric, load_spec


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="needs root for namespaces and OVS (run `make test` as root)"))


@pytest.fixture(scope="session")
def demo_fabric():
    return build_fabric(load_spec(DEFAULT_SPEC))


@pytest.fixture(scope="module")
def emu(demo_fabric):
    from emulation.net import ovs
    from emulation.net.fabric import EmulatedFabric

    ovs.check_running()
    with EmulatedFabric(demo_fabric) as fabric:
        yield fabric


@pytest.fixture(scope="module")
def fabric_and_controller(demo_fabric, tmp_path_factory):
    """The demo fabric with the real controller daemon (a child process, fresh store) attached."""
    from emulation.net import ovs
    from emulation.net.fabric import EmulatedFabric
    from emulation.processes.controller_process import ControllerProcess, Ports

    ovs.check_running()
    tmp = tmp_path_factory.mktemp("controller")
    ports = Ports.pick()
    ctl = ControllerProcess(None, tmp / "intent.db", ports, tmp / "controller.log", reconcile_interval_s=1.0)
    with EmulatedFabric(demo_fabric, controller=ports.controller_target) as emu:
        ctl.start()
        try:
            ctl.wait_ready(len(demo_fabric.switches))
            yield emu, ctl
        finally:
            ctl.stop()


@pytest.fixture
def ctl(fabric_and_controller):
    """The controller; after the test its intent is emptied again, even if the test failed half-way."""
    ctl = fabric_and_controller[1]
    yield ctl
    if ctl.proc is None or ctl.proc.poll() is not None:
        ctl.start()
        ctl.wait_ready(len(fabric_and_controller[0].fabric.switches))
    from tests.integration.helpers import clear_intent

    with ctl.client() as client:
        clear_intent(client)
    ctl.wait_reconciles(1)
