"""The role policy and the daemon's secure defaults, without a network."""

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from controller.api.client import ClientTls
from controller.runtime.config import ConfigError, DaemonConfig, Listen, TlsFiles
from controller.security import certs
from controller.security.policy import (
    PLACEMENT,
    Policy,
    PolicyError,
    Role,
    fingerprint,
    load_policy,
    policy_from_doc,
)
from controller.security.tokens import TokensError, add_token, load_tokens, read_token, tokens_from_doc


def test_each_role_may_call_what_the_issue_gives_it_and_nothing_else():
    scheduler, agent, operator, viewer = Role.SCHEDULER, Role.AGENT, Role.OPERATOR, Role.VIEWER
    cases = {
        "/railyard.v1.PlacementService/PlaceJob": {scheduler},
        "/railyard.v1.PlacementService/WatchJobs": {scheduler, operator, viewer},
        "/railyard.v1.FabricService/DrainSwitch": {operator},
        "/railyard.v1.FabricService/PinFlow": {operator},
        "/railyard.v1.FabricService/ListLinks": {scheduler, operator, viewer},
        "/railyard.v1.FabricService/GetFreeCapacity": {scheduler, operator, viewer},
        "/railyard.v1.FabricService/GetFabric": {scheduler, operator, viewer},
        "/railyard.v1.FabricService/ListPins": {operator, viewer},
        "/railyard.v1.TelemetryService/ReportTelemetry": {agent},
        "/grpc.health.v1.Health/Check": set(Role),
        "/railyard.v1.PlacementService/NoSuchMethod": set(),
    }
    for method, roles in cases.items():
        assert {r for r in Role if Policy.allows(r, method)} == roles, method


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ([], "policy", "must be a mapping of identities"),
        ({"identities": {}, "extra": 1}, "policy", "must be a mapping of identities"),
        ({"identities": {"a": "viewer"}, "revoked": "sha256:00"}, "revoked", "must be a list"),
        ({"identities": {"a": "viewer"}, "revoked": ["AB:CD"]}, "revoked[0]", "'AB:CD' is not a fingerprint"),
        ({"identities": {}}, "identities", "non-empty mapping"),
        ({"identities": {"alice": "admin"}}, "identities.alice", "'admin' is not a role"),
        ({"identities": {"": "viewer"}}, "identities", "is not an identity"),
        ({"identities": {"x" * 65: "viewer"}}, "identities", "is not an identity"),
        ({"identities": {"a": {"role": "agent", "switches": []}}}, "identities.a.switches", "non-empty list"),
        ({"identities": {"a": {"role": "viewer", "switches": ["s"]}}}, "identities.a.switches", "only an agent"),
        ({"identities": {"a": {"role": "agent", "rack": 7}}}, "identities.a", "unknown keys ['rack']"),
        ({"identities": {"a": {"role": "god"}}}, "identities.a", "'god' is not a role"),
    ],
)
def test_a_bad_policy_names_its_field(doc, field, words):
    with pytest.raises(PolicyError) as err:
        policy_from_doc(doc)
    assert err.value.field == field and words in str(err.value)


def test_a_good_policy_maps_identities_to_roles():
    policy = policy_from_doc({"identities": {"slurm": "scheduler", "grafana": "viewer"}})
    grant = policy.grant_of("slurm")
    assert grant is not None and grant.role is Role.SCHEDULER and policy.grant_of("mallory") is None
    agent = policy_from_doc({"identities": {"a7": {"role": "agent", "switches": ["ryl0r0"]}}}).grant_of("a7")
    assert agent is not None and agent.switches == {"ryl0r0"}
    assert policy.allows(Role.SCHEDULER, PLACEMENT + "PlaceJob")


def test_a_policy_revokes_certificates_by_their_fingerprint(tmp_path):
    certs.init_dir(tmp_path)
    pem = (tmp_path / "scheduler.crt").read_bytes()
    revoked = fingerprint(pem)
    assert revoked.startswith("sha256:") and len(revoked) == 7 + 64
    assert fingerprint(pem.decode()) == revoked != fingerprint((tmp_path / "agent.crt").read_bytes())
    policy = policy_from_doc({"identities": {"scheduler": "scheduler"}, "revoked": [revoked]})
    assert policy.revoked == {revoked}


def test_the_shipped_policy_gives_a_role_to_every_identity_certs_init_and_the_docs_make(tmp_path):
    """`railyard certs init` makes these client certificates; the docs' token
    example is `certs token extender`; the daemon probes itself as its server
    certificate's name. A switch speaks OpenFlow only and needs no API role."""
    policy = load_policy(Path(__file__).parents[2] / "deploy" / "policy.yaml")
    made = {*certs.CLIENTS, certs.SERVER_NAME, "extender"} - {"switch"}
    assert made <= policy.grants.keys(), made - policy.grants.keys()
    assert "switch" not in policy.grants


def config(**listen: str) -> DaemonConfig:
    addresses = {"openflow": "127.0.0.1:6653", "grpc": "127.0.0.1:50051", "metrics": "127.0.0.1:8653", **listen}
    insecure = addresses.pop("insecure", "") == "yes"
    openflow, grpc, metrics = (Listen.parse(addresses[k], k) for k in ("openflow", "grpc", "metrics"))
    return DaemonConfig(Path("x.db"), openflow, grpc, metrics, insecure=insecure)


@pytest.mark.parametrize("listener", ["openflow", "grpc", "metrics"])
def test_a_cleartext_listener_off_loopback_is_refused_unless_insecure(listener):
    with pytest.raises(ConfigError) as err:
        config(**{listener: "10.1.2.3:1234"})
    assert err.value.field == f"{listener}-listen" and "--insecure" in str(err.value)
    config(**{listener: "10.1.2.3:1234", "insecure": "yes"})
    config(**{listener: "[::1]:1234"})
    config(**{listener: "localhost:1234"})


def test_certs_init_makes_a_ca_and_certificates_that_chain_to_it(tmp_path):
    names = certs.init_dir(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    for name in names[1:]:
        cert = x509.load_pem_x509_certificate((tmp_path / f"{name}.crt").read_bytes())
        assert cert.issuer == ca.subject
        ca_key = ca.public_key()
        assert isinstance(ca_key, ec.EllipticCurvePublicKey) and cert.signature_hash_algorithm is not None
        ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        expires = getattr(cert, "not_valid_after_utc", None) or cert.not_valid_after.replace(tzinfo=dt.UTC)
        assert expires > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
        assert (tmp_path / f"{name}.key").stat().st_mode & 0o077 == 0  # the key: its owner's alone
    server = x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    with pytest.raises(FileExistsError):
        certs.init_dir(tmp_path)  # never silently replaced


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ({"identities": {}}, "tokens", "one key, tokens"),
        ({"tokens": []}, "tokens", "non-empty mapping"),
        ({"tokens": {"ext": "s3cret-token-in-the-clear"}}, "tokens.ext", "not the token itself"),
        ({"tokens": {"ext": "sha256:" + "AB" * 32}}, "tokens.ext", "lowercase hex"),
        ({"tokens": {"": DIGEST}}, "tokens", "is not an identity"),
        ({"tokens": {"a": DIGEST, "b": DIGEST}}, "tokens", "share one token"),
    ],
)
def test_a_bad_tokens_file_names_its_field(doc, field, words):
    with pytest.raises(TokensError) as err:
        tokens_from_doc(doc)
    assert err.value.field == field and words in str(err.value)


def test_a_token_names_its_identity_and_only_its_digest_is_kept(tmp_path):
    path = add_token(tmp_path, "extender")
    add_token(tmp_path, "script")
    token = read_token(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert token not in (tmp_path / "tokens.yaml").read_text()  # the digest, not the secret
    book = load_tokens(tmp_path / "tokens.yaml")
    assert book.identity_of(token) == "extender"
    assert book.identity_of(read_token(tmp_path / "script.token")) == "script"
    assert book.identity_of(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    with pytest.raises(TokensError, match="already has a token"):
        add_token(tmp_path, "extender")
    with pytest.raises(TokensError) as err:
        add_token(tmp_path, "../escape")
    assert err.value.field == "identity"


@pytest.mark.parametrize("content", ["", "short", "has space inside the token", "x" * 513])
def test_a_token_file_without_a_token_is_refused(tmp_path, content):
    (tmp_path / "t").write_text(content)
    with pytest.raises(TokensError, match="does not hold a token"):
        read_token(tmp_path / "t")


def test_tokens_need_their_listener_and_a_client_holds_one_identity(tmp_path):
    with pytest.raises(ConfigError) as err:
        TlsFiles(tmp_path, tmp_path, tmp_path, tmp_path, tokens=tmp_path / "tokens.yaml")
    assert err.value.field == "grpc-token-listen"
    with pytest.raises(ValueError, match="certificate and its key, or a bearer token"):
        ClientTls(b"ca", cert=b"c", key=b"k", token="t" * 20)
    with pytest.raises(ValueError, match="certificate and its key, or a bearer token"):
        ClientTls(b"ca")


def test_a_reload_refuses_a_key_that_is_not_its_certificates_and_a_ca_that_is_not_one(tmp_path):
    from controller.errors import FieldError

    certs.init_dir(tmp_path)
    (tmp_path / "policy.yaml").write_text("identities: {scheduler: scheduler}\n")
    files = TlsFiles(tmp_path / "server.crt", tmp_path / "server.key", tmp_path / "ca.crt", tmp_path / "policy.yaml")
    files.load()  # a matching set
    mismatched = TlsFiles(files.cert, tmp_path / "agent.key", files.ca, files.policy)
    with pytest.raises(FieldError) as err:
        mismatched.load()
    assert err.value.field == "tls-key"
    (tmp_path / "not-a-ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    garbage = TlsFiles(files.cert, files.key, tmp_path / "not-a-ca.crt", files.policy)
    with pytest.raises(FieldError) as err:
        garbage.load()
    assert err.value.field == "tls-ca"
