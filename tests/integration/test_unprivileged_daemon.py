"""The controller daemon needs no privilege: root sets up the emulated fabric,
then the daemon runs as `nobody` with no capabilities and no way to gain any
(setpriv), and still reconciles the switches, serves the API and writes its
store.

CI clones under /root, which `nobody` may not enter. The daemon is started
in a mount namespace of its own where a tmpfs over the first closed
directory makes a way down to the checkout (bound to its own path, so the
virtualenv's paths still hold); nothing outside that namespace changes."""

import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports
from tests.integration.helpers import railyard_entries

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]

# $1 the checkout, $2 its first ancestor closed to others ("" if none), $3 an
# empty directory to hold the checkout while the tmpfs goes over $2, $4 the
# user id; then the command.
AS_USER = """set -e
repo="$1"; closed="$2"; hold="$3"; uid="$4"; shift 4
if [ -n "$closed" ]; then
    mount --bind "$repo" "$hold"
    mount -t tmpfs -o mode=0755,size=1m railyard-path "$closed"
    mkdir -p "$repo"
    mount --bind "$hold" "$repo"
fi
exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
"""


def first_closed_ancestor(path: Path) -> Path | None:
    """The outermost directory above `path` that others may not pass through."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_the_daemon_runs_as_nobody_without_capabilities_and_does_its_job(demo_fabric, tmp_path):
    assert Path(sys.prefix).is_relative_to(REPO), "the virtualenv must live in the checkout (make setup puts it there)"
    closed = first_closed_ancestor(REPO)
    state = Path(tempfile.mkdtemp(prefix="railyard-nobody-"))  # /tmp: a place nobody can reach
    hold = Path(tempfile.mkdtemp(prefix="railyard-hold-"))
    try:
        os.chown(state, NOBODY, NOBODY)
        launcher = (
            *("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", AS_USER, "as-user"),
            *(str(REPO), str(closed or ""), str(hold), str(NOBODY)),
        )
        ports = Ports.pick()
        ctl = ControllerProcess(None, state / "intent.db", ports, tmp_path / "controller.log", launcher=launcher)
        switches = len(demo_fabric.switches)
        with EmulatedFabric(demo_fabric, controller=ports.controller_target):
            ctl.start()
            try:
                ctl.wait_ready(switches)
                assert ctl.proc is not None
                status = status_of(ctl.proc.pid)
                assert status["Name"].startswith("python"), status["Name"]  # the daemon itself, not a wrapper
                assert status["Uid"].split() == [str(NOBODY)] * 4, status["Uid"]
                assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == int(status["CapBnd"], 16) == 0
                assert status["NoNewPrivs"] == "1"

                with ctl.client() as client:
                    assert client.place_job("as-nobody", 4, "ring").created
                    client.pin_flow("nobody-pin", "10.0.0.1", "10.0.1.1", "rys1", "tcp", 40001, 5301)
                ctl.wait_reconciles(1)
                assert railyard_entries("ryl0r0"), "the pin's entry is not on its leaf"
            finally:
                ctl.stop()
        store = state / "intent.db"
        assert store.stat().st_uid == NOBODY
        with sqlite3.connect(store) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert any("as-nobody" in str(row) for table in tables for row in db.execute(f"SELECT * FROM {table}"))
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(hold, ignore_errors=True)
