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
    from tests.integration.helpers import fabric_with_daemon

    with fabric_with_daemon(demo_fabric, None, tmp_path_factory.mktemp("controller")) as both:
        yield both


@pytest.fixture
def ctl(fabric_and_controller):
    """The controller; after the test its intent is emptied again, even if the test failed half-way."""
    ctl = fabric_and_controller[1]
    yield ctl
    if ctl.proc is None or ctl.proc.poll() is not None:
        ctl.start()
        ctl.wait_ready(len(fabric_and_controller[0].fabric.switches))
    from tests.integration.helpers import emptied

    emptied(ctl)
