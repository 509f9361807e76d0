"""Dashboards, provisioning, alert rules and deployment files, checked as files
and with the real promtool."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.intent.etcd_store import MAX_TXN_BYTES, MAX_TXN_OPS
from controller.security.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
EXPECTED_UIDS = {"railyard-fabric", "railyard-controller", "railyard-jobs"}
PROMTOOL = shutil.which("promtool")
DATASOURCE_UID = "railyard-prometheus"
VARIABLE = "${datasource}"


def panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_dashboards_have_stable_unique_uids_and_a_datasource_variable_defaulting_to_the_provisioned_one():
    """Every query names the data source through the `datasource` variable, so a
    dashboard imported into an existing Grafana finds that Grafana's Prometheus;
    provisioned, the variable starts at Railyard's."""
    datasources = yaml.safe_load((ROOT / "grafana/provisioning/datasources/railyard.yaml").read_text())
    assert [d["uid"] for d in datasources["datasources"]] == [DATASOURCE_UID]
    providers = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/railyard.yaml").read_text())["providers"]
    assert providers[0]["allowUiUpdates"] is False
    docs = [json.loads(p.read_text()) for p in DASHBOARDS]
    assert {d["uid"] for d in docs} == EXPECTED_UIDS and len(docs) == len(EXPECTED_UIDS)
    for doc in docs:
        ids = [p["id"] for p in panels(doc)]
        assert len(ids) == len(set(ids)), doc["uid"]
        (source, *variables) = doc["templating"]["list"]
        assert source["name"] == "datasource" and source["type"] == "datasource" and source["query"] == "prometheus"
        assert source["current"]["value"] == DATASOURCE_UID
        for panel in panels(doc):
            assert panel["datasource"]["uid"] == VARIABLE, (doc["uid"], panel["title"])
            assert panel["targets"] and all(t["datasource"]["uid"] == VARIABLE for t in panel["targets"])
        for var in variables:
            assert var["datasource"]["uid"] == VARIABLE
        assert DATASOURCE_UID not in json.dumps(doc["panels"])  # no query pins the provisioned uid
    names = {v["name"] for d in docs for v in d["templating"]["list"]}
    assert {"switch", "tier", "plane"} <= names


@pytest.mark.skipif(not PROMTOOL, reason="promtool not installed (make setup installs it)")
def test_promtool_accepts_config_and_rules_and_the_rule_unit_tests_pass():
    assert PROMTOOL is not None  # the skipif above
    deploy = ROOT / "deploy" / "prometheus"
    for args in (
        ["check", "config", "prometheus.yml"],
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ):
        result = subprocess.run([PROMTOOL, *args], cwd=deploy, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def _referenced_files(compose: dict) -> list[str]:
    refs = []
    for service in compose["services"].values():
        build = service.get("build")
        if isinstance(build, dict):
            refs.append(str(Path(build.get("context", ".")) / build.get("dockerfile", "Dockerfile")))
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                refs.append(source)
    return refs


def test_compose_kubernetes_and_systemd_files_parse_and_reference_only_files_that_exist():
    deploy = ROOT / "deploy"
    compose = yaml.safe_load((deploy / "docker-compose.yml").read_text())
    assert {"controller", "prometheus", "grafana", "fabric"} <= set(compose["services"])
    assert compose["services"]["fabric"].get("privileged") is True
    for ref in _referenced_files(compose):
        assert (deploy / ref).exists(), ref
    kinds = set()
    for path in sorted((deploy / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            # kube-scheduler's configuration file is no API object: it has no name.
            assert doc["apiVersion"] and (doc["kind"] == "KubeSchedulerConfiguration" or doc["metadata"]["name"])
            kinds.add(doc["kind"])
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "KubeSchedulerConfiguration"} <= kinds
    extender = next(yaml.safe_load_all((deploy / "k8s/scheduler-extender.yaml").read_text()))["extenders"][0]
    assert extender["filterVerb"] == "filter" and extender["prioritizeVerb"] == "prioritize"
    assert extender["nodeCacheCapable"] is True and extender["enableHTTPS"] is True
    unit = (deploy / "railyard.service").read_text()
    assert "[Service]" in unit and "railyard controller run" in unit
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        check = subprocess.run(
            [docker, "compose", "-f", str(deploy / "docker-compose.yml"), "config", "-q"],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr


def test_the_systemd_unit_runs_unprivileged_and_sandboxed_with_exposure_at_most_2():
    unit = ROOT / "deploy" / "railyard.service"
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (Debian's systemd package) is needed to rate the unit"
    out = subprocess.run(
        [analyze, "security", "--offline=yes", str(unit)], capture_output=True, text=True, check=True
    ).stdout
    (line,) = [ln for ln in out.splitlines() if "Overall exposure level" in ln]
    exposure = float(line.split(":")[1].split()[0])
    assert exposure <= 2.0, line
    settings = dict(ln.split("=", 1) for ln in unit.read_text().splitlines() if "=" in ln and not ln.startswith("#"))
    assert settings["DynamicUser"] == "yes" and settings["CapabilityBoundingSet"] == ""
    assert settings["NoNewPrivileges"] == "yes" and settings["ProtectSystem"] == "strict"


INSTALLED = "/opt/railyard/venv/bin/railyard"  # where docs/deployment.md's install step puts the command


def test_the_systemd_unit_is_type_notify_reloads_on_sighup_and_runs_the_documented_install(tmp_path):
    unit = (ROOT / "deploy" / "railyard.service").read_text()
    settings = dict(ln.split("=", 1) for ln in unit.splitlines() if "=" in ln and not ln.startswith("#"))
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert settings["ExecStart"].split()[0] == INSTALLED
    assert f"python3.11 -m venv {INSTALLED.removesuffix('/bin/railyard')}" in (ROOT / "docs/deployment.md").read_text()
    # systemd's own check of the unit, with the command where this machine has one.
    local = tmp_path / "railyard.service"
    local.write_text(unit.replace(INSTALLED, str(Path(sys.executable).parent / "railyard")))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (Debian's systemd package) is needed to check the unit"
    check = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_kubernetes_prometheus_configmap_carries_the_alert_rules_it_names():
    data = yaml.safe_load((ROOT / "deploy/k8s/prometheus.yaml").read_text())["data"]
    assert yaml.safe_load(data["prometheus.yml"])["rule_files"] == ["alerts.yml"]
    assert data["alerts.yml"] == (ROOT / "deploy/prometheus/alerts.yml").read_text()


@pytest.mark.parametrize(
    ("manifest", "kind", "ports"),
    [
        ("controller.yaml", "Deployment", [6653, 8653, 50051]),
        ("controller-ha.yaml", "StatefulSet", [6653, 8653, 8890, 50051]),
        ("etcd.yaml", "StatefulSet", [2379, 2379, 2380]),
    ],
)
def test_kubernetes_runs_every_pod_non_root_read_only_without_capabilities_behind_a_network_policy(
    manifest, kind, ports
):
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all((ROOT / "deploy/k8s" / manifest).read_text())}
    pod = docs[kind]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"] == docs[kind]["spec"]["selector"] and policy["policyTypes"] == ["Ingress"]
    assert sorted(port["port"] for rule in policy["ingress"] for port in rule["ports"]) == ports  # nothing else


def test_the_replicas_are_ready_only_on_the_leader_and_reach_etcd_over_tls():
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/controller-ha.yaml").read_text()))
    replicas = next(d for d in docs if d["kind"] == "StatefulSet")
    assert replicas["spec"]["replicas"] == 3
    container = replicas["spec"]["template"]["spec"]["containers"][0]
    probe = container["readinessProbe"]["exec"]["command"]
    assert probe[:4] == ["railyard", "health", "--service", "railyard.leader"]
    args = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])
    assert args["store"].startswith("etcd://") and args["store"].count(":2379") == 3
    assert {"etcd-ca", "etcd-cert", "etcd-key", "advertise"} <= args.keys()
    policy = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["policy.yaml"])
    assert policy["identities"]["railyard-controller"] == "viewer"  # the probe's own identity may ask for health
    etcd = next(
        d for d in yaml.safe_load_all((ROOT / "deploy/k8s/etcd.yaml").read_text()) if d["kind"] == "StatefulSet"
    )
    etcd_args = etcd["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-cert-auth" in etcd_args and "--peer-client-cert-auth" in etcd_args
    # etcd must take Railyard's largest change (flags of the form --name=value).
    flags = dict(a.removeprefix("--").split("=", 1) for a in etcd_args if "=" in a)
    assert int(flags["max-request-bytes"]) > MAX_TXN_BYTES and int(flags["max-txn-ops"]) > MAX_TXN_OPS
    assert "--extender-listen=0.0.0.0:8890" in {f"--{k}={v}" for k, v in args.items()}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    assert 8890 in {p["port"] for p in services["railyard"]["spec"]["ports"]}  # the leader answers the scheduler


def test_the_image_runs_as_a_user_and_compose_publishes_on_loopback_with_grafana_logins():
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and not users[-1].startswith(("0", "root"))
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"]
    published = [p for service in compose.values() for p in service.get("ports", [])]
    assert published and all(p.startswith("127.0.0.1:") for p in published), published
    assert compose["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus package) not installed")
@pytest.mark.parametrize("name", ["prometheus-tls.yml", "prometheus-ha.yml"])
def test_promtool_accepts_the_tls_scrape_configs(tmp_path, name):
    from controller.security import certs
    from emulation.processes.prometheus_local import tls_config

    certs.init_dir(tmp_path / "pki")
    config = yaml.safe_load((ROOT / "deploy/prometheus" / name).read_text())
    scrape = config["scrape_configs"][0]
    assert scrape["scheme"] == "https"
    assert set(scrape["tls_config"]) == {"ca_file", "cert_file", "key_file", "server_name"}
    scrape["tls_config"] = tls_config(tmp_path / "pki", server_name="controller")  # the files, where they are here
    shutil.copy(ROOT / "deploy/prometheus/alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    assert PROMTOOL is not None  # the skipif above
    check = [PROMTOOL, "check", "config", "prometheus.yml"]
    result = subprocess.run(check, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def _compose_schema_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)], capture_output=True, text=True
    )


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose-ha.yml"])
def test_the_compose_files_validate_against_the_compose_specification(tmp_path, name):
    check = _compose_schema_check(ROOT / "deploy" / name)
    assert check.returncode == 0, check.stdout + check.stderr
    for ref in _referenced_files(yaml.safe_load((ROOT / "deploy" / name).read_text())):
        assert (ROOT / "deploy" / ref).exists(), ref
    broken = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())
    broken["services"]["controller"]["depends_on"]["pki"] = {"condition": "when-it-feels-like-it"}
    (tmp_path / "compose.yml").write_text(yaml.safe_dump(broken))
    assert _compose_schema_check(tmp_path / "compose.yml").returncode == 1  # the check can fail


def test_every_deployment_puts_the_listeners_on_tls():
    entrypoint = (ROOT / "deploy/Dockerfile").read_text().split("\nENTRYPOINT", 1)[1]
    for flag in ("--tls-cert", "--tls-key", "--tls-ca", "--policy"):
        assert flag in entrypoint
    assert "--insecure" not in entrypoint
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"]
    assert "controller-pki:/etc/railyard/pki:ro" in compose["controller"]["volumes"]
    assert "ssl:127.0.0.1:6653" in compose["fabric"]["command"] and "--tls" in compose["fabric"]["command"]
    assert "./prometheus/prometheus-tls.yml:/etc/prometheus/prometheus.yml:ro" in compose["prometheus"]["volumes"]
    # Each party's volume holds its own key only; the CA's key stays in the pki step's.
    assert not any("railyard-ca" in v for s in ("controller", "fabric", "prometheus") for v in compose[s]["volumes"])
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/controller.yaml").read_text()))
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert {"name": "pki", "secret": {"secretName": "railyard-pki", "defaultMode": 0o440}} in pod["volumes"]
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    policy = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["policy.yaml"]
    assert yaml.safe_load(policy)["identities"]["scheduler"] == "scheduler"
    scrape = yaml.safe_load(yaml.safe_load((ROOT / "deploy/k8s/prometheus.yaml").read_text())["data"]["prometheus.yml"])
    assert scrape["scrape_configs"][0]["scheme"] == "https"
    unit = (ROOT / "deploy/railyard.service").read_text()
    assert "--tls-cert %d/server.crt" in unit and "LoadCredential=server.key:/etc/railyard/pki/server.key" in unit
    load_policy(ROOT / "deploy/policy.yaml")  # the shipped policy is a valid one
