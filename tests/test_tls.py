"""Every client of the suite follows the kubeconfig's TLS settings as written: the
Kubernetes API client and the console websocket, against a loopback TLS server."""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from urllib3.exceptions import MaxRetryError

from core.kube import load_api_client, tls_unverified
from fixtures.guest import SerialConsoleGuestAccess
from kubevirtci.local.pki import CertificateAuthority, Identity

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _ApiServer(BaseHTTPRequestHandler):
    """Answers /version, and upgrades the console subresource to a websocket."""

    def do_GET(self) -> None:
        key = self.headers.get("Sec-WebSocket-Key")
        if key:
            accept = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest())
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept.decode())
            self.send_header("Sec-WebSocket-Protocol", "plain.kubevirt.io")
            self.end_headers()
            return
        body = json.dumps({key: "" for key in (
            "buildDate", "compiler", "gitCommit", "gitTreeState", "goVersion", "platform")}
            | {"gitVersion": "v1.37.2", "major": "1", "minor": "37"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, CertificateAuthority]]:
    """A loopback TLS server whose certificate names only ``kubernetes`` (not 127.0.0.1)."""
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    identity = Identity("apiserver", "kube-apiserver", dns_names=("kubernetes",),
                        server=True, client=False)
    ca.ensure()
    ca.ensure_leaf(identity)
    cert, key = ca.leaf_paths(identity.stem)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], ca
    httpd.shutdown()


def kubeconfig(path: Path, port: int, **cluster: object) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", **cluster}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def both_clients_connect(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().git_version == "v1.37.2"
    SerialConsoleGuestAccess(api, "user", "pw")._connect("vmi", "ns").close()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_skip_tls_verify_is_honoured_and_said(server, tmp_path):
    port, _ = server
    api = load_api_client(kubeconfig(tmp_path / "kc", port, **{"insecure-skip-tls-verify": True}),
                          None)
    both_clients_connect(api)
    assert "NOT verified" in tls_unverified(api.configuration)


def test_the_kubeconfigs_ca_and_server_name_are_used(server, tmp_path):
    port, ca = server
    api = load_api_client(kubeconfig(tmp_path / "kc", port, **{
        "certificate-authority": str(ca.cert_path), "tls-server-name": "kubernetes"}), None)
    both_clients_connect(api)
    assert tls_unverified(api.configuration) is None


def test_an_unknown_ca_is_refused_by_every_client(server, tmp_path):
    port, _ = server
    api = load_api_client(kubeconfig(tmp_path / "kc", port, **{"tls-server-name": "kubernetes"}),
                          None)
    api.configuration.retries = 0
    with pytest.raises(MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):
        client.VersionApi(api).get_code()
    with pytest.raises(ssl.SSLCertVerificationError):
        SerialConsoleGuestAccess(api, "user", "pw")._connect("vmi", "ns")


def test_a_name_the_certificate_does_not_carry_is_refused(server, tmp_path):
    port, ca = server
    api = load_api_client(kubeconfig(tmp_path / "kc", port,
                                     **{"certificate-authority": str(ca.cert_path)}), None)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.1"):
        SerialConsoleGuestAccess(api, "user", "pw")._connect("vmi", "ns")
