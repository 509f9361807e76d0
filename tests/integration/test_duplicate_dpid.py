"""Two Open vSwitch bridges claiming one switch's datapath id, against the
real daemon: the first keeps the switch, the second is refused, logged and
counted, however often it retries."""

import time

from controller.fabric import load_fabric
from emulation.net import ovs
from emulation.processes.controller_process import ControllerProcess, Ports, total

SWITCH = "ryl0r0"
BRIDGES = ("rydup-a", "rydup-b")  # this test's own: removed by it, and only they


def test_a_second_bridge_with_a_connected_switchs_dpid_is_refused_and_counted(tmp_path):
    ovs.check_running()
    dpid = load_fabric().switch(SWITCH).dpid
    ctl = ControllerProcess(None, tmp_path / "intent.db", Ports.pick(), tmp_path / "controller.log").start()
    try:
        ctl.wait_serving_api()
        ovs.add_bridge(BRIDGES[0], dpid, ctl.ports.controller_target, "rydup")
        deadline = time.monotonic() + 20
        while total(ctl.metrics(), "railyard_switch_up", switch=SWITCH) != 1:
            assert time.monotonic() < deadline, "the first bridge never connected"
            time.sleep(0.2)
        ovs.add_bridge(BRIDGES[1], dpid, ctl.ports.controller_target, "rydup")
        deadline = time.monotonic() + 20
        while total(ctl.metrics(), "railyard_errors_total", component="southbound", reason="duplicate_dpid") < 1:
            assert time.monotonic() < deadline, "the second bridge was never refused"
            time.sleep(0.2)
        time.sleep(2)  # it retries: still refused, and the first keeps the switch
        assert total(ctl.metrics(), "railyard_switch_up", switch=SWITCH) == 1
        log = (tmp_path / "controller.log").read_text()
        assert "claims its dpid" in log and "refused" in log
    finally:
        ovs.delete_bridges([b for b in BRIDGES if b in ovs.all_bridges()])
        ctl.stop()
