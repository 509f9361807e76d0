"""Every panel of every dashboard, evaluated against a real Prometheus that
scrapes the real controller while a colliding elephant scenario runs."""

import json
import re
import time
from pathlib import Path

import pytest

from emulation.agent.telemetry_agent import TelemetryAgent
from emulation.processes.controller_process import free_port
from emulation.processes.prometheus_local import LocalPrometheus
from emulation.scenarios.emulable import steady_flows
from emulation.traffic.iperf import TrafficRun
from emulation.workload import load_workload
from emulation.workload.expand import expand
from emulation.workload.placers import railyard_placer

DASHBOARDS = sorted((Path(__file__).resolve().parents[2] / "grafana" / "dashboards").glob("*.json"))


def substitute(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def label_values_query(query: str) -> str:
    found = re.fullmatch(r"label_values\((\w+), *(\w+)\)", query)
    assert found is not None, query
    metric, label = found.groups()
    return f"group by ({label}) ({metric})"


@pytest.fixture(scope="module")
def loaded_prometheus(fabric_and_controller):
    emu, ctl = fabric_and_controller
    prometheus = LocalPrometheus([f"127.0.0.1:{ctl.ports.metrics}"], free_port()).start()
    agent = TelemetryAgent(emu.fabric, f"127.0.0.1:{ctl.ports.grpc}").start()
    try:
        with ctl.client() as client:
            client.place_job("observed", 4, "ring", flow_gbps=50.0)  # API traffic, GPUs allocated
            elephant = load_workload("elephant")
            plan = expand(emu.fabric, elephant, 3, railyard_placer(emu.fabric))  # a seed that collides
            flows = steady_flows(emu.fabric, plan, elephant.duration_s)
            run = TrafficRun(emu.popen, flows, duration_s=12).start()
            try:
                run.wait()
            finally:
                run.stop()
            client.list_jobs()
            time.sleep(2)
            yield prometheus
            client.release_job("observed")
    finally:
        agent.stop()
        prometheus.stop()


def test_every_panel_query_is_valid_promql_and_returns_data(loaded_prometheus):
    empty, invalid = [], []
    count = 0
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                count += 1
                answer = loaded_prometheus.query(substitute(target["expr"]))
                where = f"{dashboard['uid']} / {panel['title']} / {target['refId']}"
                if answer.get("status") != "success":
                    invalid.append((where, answer.get("error")))
                elif not answer["data"]["result"]:
                    empty.append(where)
        for var in dashboard["templating"]["list"]:
            if var["type"] == "datasource":  # picks a data source; queries nothing
                continue
            answer = loaded_prometheus.query(label_values_query(var["query"]["query"]))
            if answer.get("status") != "success" or not answer["data"]["result"]:
                empty.append(f"{dashboard['uid']} / variable {var['name']}")
    assert count >= 20
    assert not invalid, invalid
    assert not empty, f"panels with no data: {empty}"


def test_the_scenario_left_its_mark(loaded_prometheus):
    reroutes = loaded_prometheus.query('sum(railyard_te_decisions_total{kind="reroute"})')["data"]["result"]
    assert float(reroutes[0]["value"][1]) >= 1
    up = loaded_prometheus.query('up{job="railyard"}')["data"]["result"]
    assert up and up[0]["value"][1] == "1"
