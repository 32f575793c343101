"""A throw-away certificate authority for TLS tests (trustme), written out as PEM files."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

trustme = __import__("pytest").importorskip("trustme")


class Tls(NamedTuple):
    ca: trustme.CA
    ca_pem: Path  # the CA certificate: the broker's truststore and the clients' CA
    server_pem: Path  # the broker's key and certificate chain (127.0.0.1, localhost)
    client_cert: Path  # a client certificate, CN=alice,OU=eng,O=brokkr tests
    client_key: Path
    client_subject: str  # its subject as RFC 4514 prints it


def make_tls(directory: Path) -> Tls:
    from cryptography import x509

    ca = trustme.CA(organization_name="brokkr test CA")
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(
        "alice@example.com", common_name="alice", organization_name="brokkr tests", organization_unit_name="eng"
    )
    tls = Tls(
        ca,
        directory / "ca.pem",
        directory / "server.pem",
        directory / "client.pem",
        directory / "client.key",
        x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes()).subject.rfc4514_string(),
    )
    ca.cert_pem.write_to_path(tls.ca_pem)
    server.private_key_and_cert_chain_pem.write_to_path(tls.server_pem)
    client.cert_chain_pems[0].write_to_path(tls.client_cert)
    client.private_key_pem.write_to_path(tls.client_key)
    return tls
