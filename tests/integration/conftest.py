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
    from emulation import ovs
    from emulation.net import EmulatedFabric

    ovs.check_running()
    with EmulatedFabric(demo_fabric) as fabric:
        yield fabric
