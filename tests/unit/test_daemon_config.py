"""The daemon's configuration refuses each mistake before anything opens,
naming the option, what was wrong and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.cli.daemon import UNDERLAY_ECMP
from controller.runtime.config import ConfigError, DaemonConfig, Listen, TlsFiles
from controller.southbound.underlay import Ecmp

LOOP = {"openflow": Listen("127.0.0.1", 6653), "grpc": Listen("127.0.0.1", 50051), "metrics": Listen("::1", 8653)}


def config(**changes) -> DaemonConfig:
    return DaemonConfig(store=Path("/tmp/x.db"), **(LOOP | changes))


def test_the_defaults_on_loopback_are_a_valid_configuration():
    assert config().southbound == "openflow"
    assert Listen("localhost", 1).loopback and not Listen("ctl.example", 1).loopback


@pytest.mark.parametrize(
    "changes, option",
    [
        ({"mutations_per_s": 0.0}, "mutations-per-second"),
        ({"telemetry_records_per_s": 0.5}, "telemetry-records-per-second"),
        ({"telemetry_streams_per_caller": 33}, "telemetry-streams-per-caller"),
        ({"metrics_client_certs": True}, "metrics-client-certs"),
        ({"grpc": Listen("10.0.0.1", 50051)}, "grpc-listen"),
        ({"extender": Listen("0.0.0.0", 8888)}, "extender-listen"),
        ({"reconcile_interval_s": 0.01}, "reconcile-interval"),
        ({"full_audit_every": 0}, "full-audit-every"),
        ({"watch_history": 0}, "watch-history"),
        ({"max_message_bytes": 1024}, "max-message-bytes"),
        ({"openflow_stats_s": 0.01}, "openflow-stats-interval"),
        ({"southbound": "netconf"}, "southbound"),
        ({"southbound": "none", "underlay": Ecmp.GROUP}, "underlay"),
        ({"southbound": "none", "openflow_stats_s": 1.0}, "openflow-stats-interval"),
        ({"sflow_agents": Path("agents.yaml")}, "sflow-agents"),
        ({"sflow": Listen("0.0.0.0", 6343)}, "sflow-agents"),
    ],
)
def test_each_mistake_is_refused_naming_its_option(changes, option):
    with pytest.raises(ConfigError) as caught:
        config(**changes)
    assert caught.value.field == option and caught.value.allowed


def test_a_cleartext_listener_off_loopback_needs_insecure():
    assert config(grpc=Listen("10.0.0.1", 50051), insecure=True).grpc.host == "10.0.0.1"


def test_tokens_and_their_listener_come_together_and_tls_files_must_be_pem(tmp_path):
    files = {name: tmp_path / name for name in ("cert", "key", "ca", "policy")}
    with pytest.raises(ConfigError) as caught:
        TlsFiles(files["cert"], files["key"], files["ca"], files["policy"], tokens=tmp_path / "tokens.yaml")
    assert caught.value.field == "grpc-token-listen"
    with pytest.raises(ConfigError) as caught:
        TlsFiles(files["cert"], files["key"], files["ca"], files["policy"]).load()
    assert caught.value.field == "tls-cert" and "cannot read" in caught.value.problem
    files["cert"].write_text("not pem")
    with pytest.raises(ConfigError) as caught:
        TlsFiles(files["cert"], files["key"], files["ca"], files["policy"]).load()
    assert caught.value.field == "tls-cert" and "not PEM" in caught.value.problem


def test_the_cli_offers_every_underlay_ecmp_and_refuses_others_by_name(capsys):
    from controller.cli.main import main

    assert tuple(e.value for e in Ecmp) == UNDERLAY_ECMP
    with pytest.raises(SystemExit) as exit_:
        main(["controller", "run", "--underlay", "ovs-groups"])
    assert exit_.value.code == 2
    assert "argument --underlay: invalid choice: 'ovs-groups' (choose from 'group', 'ovs-bundle')" in (
        capsys.readouterr().err
    )
