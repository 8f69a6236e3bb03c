"""The hermetic cluster's PKI: what is there is kept while it serves and issued afresh
when it does not, and keys are private from their first byte."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from kubevirtci.local import pki
from kubevirtci.local.controlplane import ControlPlane
from kubevirtci.local.layout import ClusterConfig, Layout
from kubevirtci.local.pki import (
    CA_LIFETIME,
    LEAF_LIFETIME,
    RENEW_MARGIN,
    CertificateAuthority,
    Identity,
)
from kubevirtci.local.processes import Supervisor

NOW = datetime.datetime(2030, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
APISERVER = Identity("apiserver", "kube-apiserver", dns_names=("kubernetes",),
                     ips=("127.0.0.1",), server=True, client=False)


def certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def serial(ca: CertificateAuthority, stem: str) -> int:
    return certificate(ca.leaf_paths(stem)[0]).serial_number


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    authority = CertificateAuthority(tmp_path / "pki")
    authority.ensure(NOW - 2 * LEAF_LIFETIME)
    return authority


def test_a_certificate_that_still_serves_is_kept(ca):
    assert ca.ensure_leaf(APISERVER, NOW) == "missing"
    first = serial(ca, "apiserver")
    assert ca.ensure(NOW) is None
    assert ca.ensure_leaf(APISERVER, NOW + LEAF_LIFETIME - RENEW_MARGIN - DAY) is None
    assert serial(ca, "apiserver") == first


def test_a_certificate_within_the_margin_of_its_end_is_issued_afresh(ca):
    issued = NOW - LEAF_LIFETIME + RENEW_MARGIN - DAY  # ends 29 days after NOW
    ca.ensure_leaf(APISERVER, issued)
    old = certificate(ca.leaf_paths("apiserver")[0])
    why = ca.ensure_leaf(APISERVER, NOW)
    assert why is not None and "less than 30 days" in why
    new = certificate(ca.leaf_paths("apiserver")[0])
    assert new.serial_number != old.serial_number
    assert new.not_valid_after_utc == NOW + LEAF_LIFETIME
    assert ca.ensure_leaf(APISERVER, NOW) is None


def test_a_certificate_not_valid_yet_is_issued_afresh(ca):
    ca.ensure_leaf(APISERVER, NOW + 2 * DAY)  # a clock that was ahead
    why = ca.ensure_leaf(APISERVER, NOW)
    assert why is not None and "not valid before" in why
    assert certificate(ca.leaf_paths("apiserver")[0]).not_valid_before_utc <= NOW


@pytest.mark.parametrize(("wanted", "said"), [
    (Identity("apiserver", "kube-apiserver", dns_names=("kubernetes", "control-plane"),
              ips=("127.0.0.1", "10.96.0.1"), server=True, client=False),
     "lacks 10.96.0.1, control-plane"),
    (Identity("apiserver", "kube-apiserver", organization="system:masters",
              dns_names=("kubernetes",), ips=("127.0.0.1",), server=True, client=False),
     "its subject is CN=kube-apiserver, not CN=kube-apiserver,O=system:masters"),
    (Identity("apiserver", "kube-apiserver", dns_names=("kubernetes",), ips=("127.0.0.1",),
              server=True, client=True),
     "lacks a usage"),
], ids=["san", "organisation", "usage"])
def test_a_certificate_lacking_what_is_now_wanted_is_issued_afresh(ca, wanted, said):
    ca.ensure_leaf(APISERVER, NOW)
    why = ca.ensure_leaf(wanted, NOW)
    assert why is not None and why.startswith(said)
    assert ca.leaf_problem(wanted, NOW) is None
    new = certificate(ca.leaf_paths("apiserver")[0])
    assert new.subject == wanted.subject()
    sans = new.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans) == wanted.names()


def test_a_key_that_is_not_the_certificates_is_issued_afresh(ca, tmp_path):
    ca.ensure_leaf(APISERVER, NOW)
    other = CertificateAuthority(tmp_path / "other")
    other.ensure(NOW)
    ca.leaf_paths("apiserver")[1].write_bytes(other.key_path.read_bytes())
    assert ca.ensure_leaf(APISERVER, NOW) == "its key is not the certificate's"
    assert ca.leaf_problem(APISERVER, NOW) is None


def test_a_new_ca_issues_every_leaf_afresh(tmp_path):
    layout = Layout(tmp_path / "state")
    cluster_ca = CertificateAuthority(layout.pki)
    control_plane = ControlPlane(layout, Supervisor(layout.pids, layout.logs), cluster_ca, {})
    config = ClusterConfig.new(2, ["1G"])
    near_its_end = NOW - CA_LIFETIME + RENEW_MARGIN - DAY
    _, first = control_plane.issue(config, near_its_end)
    admin_cert = certificate(control_plane.issue(config, near_its_end)[0]["admin"][0])

    creds, reissued = control_plane.issue(config, NOW)

    assert reissued.keys() == first.keys()  # both CAs and every leaf
    assert reissued[pki.CLUSTER_CA].startswith("ends ")
    assert reissued["admin"] == "not signed by the current CA"
    for stem, (cert, _) in creds.items():
        issuer = control_plane.front_proxy_ca if stem == "front-proxy-client" else cluster_ca
        certificate(cert).verify_directly_issued_by(certificate(issuer.cert_path))
    # The admin kubeconfig names the files, so it holds the new certificate as written.
    admin = yaml.safe_load(layout.admin_kubeconfig.read_text())["users"][0]["user"]
    assert certificate(Path(admin["client-certificate"])) != admin_cert
    assert control_plane.issue(config, NOW)[1] == {}


def test_a_leaf_never_outlives_its_ca(tmp_path):
    ca = CertificateAuthority(tmp_path)
    ca.ensure(NOW - CA_LIFETIME + 2 * RENEW_MARGIN)  # 60 days left
    ca.ensure_leaf(APISERVER, NOW)
    leaf = certificate(ca.leaf_paths("apiserver")[0])
    assert leaf.not_valid_after_utc == certificate(ca.cert_path).not_valid_after_utc


def test_keys_are_private_from_their_creation_whatever_the_umask(tmp_path, monkeypatch):
    """Each file is created afresh (O_EXCL) with its final mode, so no moment exists in
    which a key is readable by others, then put in place whole."""
    created: dict[str, int] = {}
    real_open = os.open

    def recording_open(path, flags, mode=0o777, **kwargs):
        fd = real_open(path, flags, mode, **kwargs)
        if flags & os.O_CREAT:
            assert flags & os.O_EXCL, f"{path} could be a file that was there before"
            created[str(path)] = stat.S_IMODE(os.fstat(fd).st_mode)
        return fd

    monkeypatch.setattr(os, "open", recording_open)
    previous = os.umask(0)
    try:
        ca = CertificateAuthority(tmp_path)
        ca.ensure(NOW)
        ca.ensure_leaf(APISERVER, NOW)
        ca.service_account_keys()
    finally:
        os.umask(previous)
    keys = {path: mode for path, mode in created.items() if ".key." in path}
    assert len(keys) == 3 and set(keys.values()) == {0o600}, keys
    for key in (ca.key_path, ca.leaf_paths("apiserver")[1], tmp_path / "sa.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(ca.cert_path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "apiserver.crt", "apiserver.key", "ca.crt", "ca.key", "sa.key", "sa.pub"]


def test_a_write_cut_short_leaves_the_old_file_whole(tmp_path, monkeypatch):
    key = tmp_path / "x.key"
    pki.write_atomically(key, b"old key")

    def crash(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        pki.write_atomically(key, b"new key")
    assert key.read_bytes() == b"old key"
    assert [p.name for p in tmp_path.iterdir()] == ["x.key"]
