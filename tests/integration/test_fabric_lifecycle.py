"""`railyard fabric up/down` through the real CLI: down removes everything of
ours (bridges, namespaces, processes, interfaces) and nothing of anyone else's."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from controller.errors import HostError
from emulation.net import netns, ovs
from emulation.net.cleanup import alive

FOREIGN = "foreignbr0"  # deliberately not an "ry" name, as a neighbour's bridge would be


def railyard_up(state_dir):
    env = dict(os.environ, RAILYARD_STATE_DIR=str(state_dir))
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "fabric", "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_up(state_file, fabric):
    """Until `railyard fabric up` has written its state and installed the underlay."""
    wait_for(lambda: state_file.exists() and set(fabric.switches) <= set(ovs.railyard_bridges()), 60, "fabric up")
    wait_for(lambda: all(ovs.dump_flows(s) for s in fabric.switches), 30, "underlay installed")


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def foreign_bridge():
    ovs.run(["ovs-vsctl", "--may-exist", "add-br", FOREIGN, "--", "set", "bridge", FOREIGN, "datapath_type=netdev"])
    ovs.run(["ovs-ofctl", "add-flow", FOREIGN, "priority=7,ip,actions=drop"])
    yield FOREIGN
    ovs.delete_bridges([FOREIGN])


def test_fabric_down_removes_only_railyard_state(tmp_path, foreign_bridge, demo_fabric):
    state_dir = tmp_path / "state"
    up = railyard_up(state_dir)
    state_file = state_dir / f"fabric-{demo_fabric.spec.name}.json"
    try:
        wait_up(state_file, demo_fabric)
        state = json.loads(state_file.read_text())
        host_pids = list(state["hosts"].values())
        inodes = {netns.netns_inode(pid) for pid in host_pids}
        # A stray process inside a server namespace, as a crashed scenario would leave.
        stray = netns.popen(host_pids[0], ["sleep", "300"])

        down = subprocess.run(
            [sys.executable, "-m", "controller.cli", "fabric", "down"],
            env=dict(os.environ, RAILYARD_STATE_DIR=str(state_dir)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert down.returncode == 0, down.stderr
        up.wait(timeout=30)
        stray.wait(timeout=10)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGKILL)
            up.wait()

    assert ovs.railyard_bridges() == {}
    assert not state_file.exists()
    ours = [i for i in os.listdir("/sys/class/net") if i.startswith("ry")]
    assert ours == []
    assert not any(alive(pid) for pid in host_pids)
    survivors = [p for p in os.listdir("/proc") if p.isdigit() and netns.netns_inode(int(p)) in inodes]
    assert survivors == []
    shells = subprocess.run(["pgrep", "-f", "mininet:ry"], capture_output=True, text=True).stdout.split()
    assert shells == []
    # the neighbour's bridge and its flow are untouched
    assert FOREIGN in ovs.all_bridges()
    assert any("priority=7" in f for f in ovs.dump_flows(FOREIGN))


def _mininet_shells_of(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid), "-f", "mininet:"], capture_output=True, text=True).stdout
    return {int(p) for p in found.split()}


def test_a_fabric_stopped_leaves_none_of_its_shells_in_the_process_that_built_it(demo_fabric):
    # A benchmark builds a fabric per run in one long-lived process: each
    # left its remote controller's shell behind (154 in one bench.hedera).
    from emulation.net.fabric import EmulatedFabric

    before = _mininet_shells_of(os.getpid())
    with EmulatedFabric(demo_fabric):
        assert _mininet_shells_of(os.getpid()) - before
    assert _mininet_shells_of(os.getpid()) == before


def test_fabric_down_with_nothing_up_is_a_no_op(tmp_path, foreign_bridge):
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "fabric", "down"],
        env=dict(os.environ, RAILYARD_STATE_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "removed 0 Railyard bridges" in result.stdout
    assert FOREIGN in ovs.all_bridges()


def test_a_fabric_whose_owner_was_killed_is_swept_by_the_next_one_up(tmp_path, foreign_bridge, demo_fabric):
    """`fabric up` killed with -9 leaves its bridges, namespaces and state
    file behind, with nobody to tear them down; the next fabric of that name
    sweeps them (a live owner's fabric is refused, as before)."""
    from emulation.net.cleanup import teardown_from_state
    from emulation.net.fabric import EmulatedFabric

    state_dir = tmp_path / "state"
    up = railyard_up(state_dir)
    state_file = state_dir / f"fabric-{demo_fabric.spec.name}.json"
    try:
        wait_up(state_file, demo_fabric)
        with pytest.raises(HostError, match="already up"):
            EmulatedFabric(demo_fabric, state_dir=state_dir).start()
        orphaned = json.loads(state_file.read_text())
    finally:
        up.send_signal(signal.SIGKILL)
        up.wait()
    assert state_file.exists() and set(demo_fabric.switches) <= set(ovs.railyard_bridges())

    try:
        with EmulatedFabric(demo_fabric, state_dir=state_dir) as again:
            assert json.loads(state_file.read_text())["pid"] == os.getpid()
            # the orphan's servers are gone; the new fabric's are its own
            assert not set(orphaned["hosts"].values()) & set(again.host_pids.values())
            assert not any(alive(pid) for pid in orphaned["hosts"].values())
            assert all(ovs.dump_flows(s) for s in demo_fabric.switches)
    finally:
        if state_file.exists():  # the sweep failed: leave the machine as found for the tests after
            teardown_from_state(state_file)
    assert not state_file.exists()
    assert ovs.railyard_bridges() == {}
    assert FOREIGN in ovs.all_bridges()


# A run's owner as the scenario runner and the benchmarks hold one: a fabric,
# and a controller started inside it that only the run's `finally` stops.
_RUN_OWNER = """
import sys
from pathlib import Path
from controller.fabric import load_fabric
from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports

work = Path(sys.argv[1])
ctl = ControllerProcess(None, work / "te.db", Ports.pick(), work / "controller.log", te=False)
with EmulatedFabric(load_fabric(), controller=ctl.ports.controller_target, state_dir=work / "state"):
    try:
        ctl.start()
        print(ctl.proc.pid, flush=True)
        sys.stdin.read()  # until killed
    finally:
        ctl.stop()
"""


def test_sigterm_to_a_runs_owner_brings_its_fabric_and_controller_down(tmp_path, foreign_bridge, demo_fabric):
    """By default SIGTERM ends Python where it stands: a benchmark stopped so
    left its fabric up and its controller running, and `fabric down`, which
    knows fabrics, not runs, left the controller."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _RUN_OWNER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    try:
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"the run's owner exited before its controller started: {line!r}"
        controller = int(line)
        assert alive(controller) and set(demo_fabric.switches) <= set(ovs.railyard_bridges())
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    wait_for(lambda: not alive(controller), 10, "the run's controller to stop")
    assert ovs.railyard_bridges() == {}
    assert not (tmp_path / "state" / f"fabric-{demo_fabric.spec.name}.json").exists()
    assert FOREIGN in ovs.all_bridges()
