"""TLS for SSL and SASL_SSL listeners: an :class:`ssl.SSLContext` built from Kafka's
``ssl.*`` settings, and the principal name Kafka gives a client certificate; the client
side too (:func:`client_context`, for brokkr's tools: ``core/client_config.py``).

Keystores and truststores are PEM (``ssl.keystore.type=PEM``, brokkr's default): a file
holding the private key and the certificate chain (``ssl.keystore.location``) or both
inline (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``); CA certificates in a
file (``ssl.truststore.location``) or inline (``ssl.truststore.certificates``). PKCS12 is
read when the ``cryptography`` package is installed; Java's JKS is not. Every setting
may be given for one listener as ``listener.name.<listener>.<setting>``.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .config import listener_value
from .errors import ConfigError

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# TLS 1.3 suites cannot be restricted through Python's ssl module; OpenSSL's defaults apply.
_TLS13_SUITES = ("TLS_AES_", "TLS_CHACHA20_")


def server_context(config: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    """The server-side TLS context of ``listener``; ConfigError names what is missing or unreadable."""

    def setting(name: str) -> Any:
        return listener_value(config, listener, name)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_VERSIONS[v] for v in setting("ssl.enabled.protocols")]
    if not versions:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols is empty")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    where = f"listener {listener}"
    _load_keystore(ctx, setting, where)
    client_auth = _CLIENT_AUTH[setting("ssl.client.auth")]
    if not _load_truststore(ctx, setting, where) and client_auth != ssl.CERT_NONE:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = client_auth
    _set_ciphers(ctx, setting("ssl.cipher.suites"), where)
    return ctx


def client_context(setting: Callable[[str], Any], where: str) -> ssl.SSLContext:
    """A client's TLS context from Kafka's client ``ssl.*`` settings (``setting(name)``:
    a string or None): the truststore (else the system's CAs), a keystore when one is set
    (a client certificate), ``ssl.enabled.protocols``, ``ssl.cipher.suites``, and the
    host name checked unless ``ssl.endpoint.identification.algorithm`` is empty (Kafka's
    default is ``https``: checked). ``where`` names the settings' origin in errors."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    protocols = [p.strip() for p in (setting("ssl.enabled.protocols") or "").split(",") if p.strip()]
    unknown = [p for p in protocols if p not in _VERSIONS]
    if unknown:
        raise ConfigError(f"{where}: ssl.enabled.protocols: unknown protocol {unknown[0]!r} ({', '.join(_VERSIONS)})")
    if protocols:
        versions = [_VERSIONS[p] for p in protocols]
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    if any(setting(name) for name in ("ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key")):
        _load_keystore(ctx, setting, where)
    if not _load_truststore(ctx, setting, where):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    algorithm = setting("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = algorithm is None or bool(algorithm.strip())
    _set_ciphers(ctx, [s.strip() for s in (setting("ssl.cipher.suites") or "").split(",") if s.strip()], where)
    return ctx


def _load_keystore(ctx: ssl.SSLContext, setting, where: str) -> None:
    kind = (setting("ssl.keystore.type") or "PEM").upper()
    location = setting("ssl.keystore.location")
    chain, key = setting("ssl.keystore.certificate.chain"), setting("ssl.keystore.key")
    password = setting("ssl.key.password") or _no_password(where)
    try:
        if kind == "PEM":
            if location and (chain or key):
                raise ConfigError(
                    f"{where}: set ssl.keystore.location or ssl.keystore.certificate.chain and "
                    "ssl.keystore.key, not both"
                )
            if location:
                ctx.load_cert_chain(location, password=password)
            elif chain and key:
                with _private_file(f"{key.strip()}\n{chain.strip()}\n") as path:
                    ctx.load_cert_chain(path, password=password)
            else:
                raise ConfigError(
                    f"{where} uses TLS: set ssl.keystore.location (a PEM file with the private key and "
                    "certificate chain), or ssl.keystore.certificate.chain and ssl.keystore.key"
                )
        elif kind == "PKCS12":
            if not location:
                raise ConfigError(f"{where}: ssl.keystore.type=PKCS12 needs ssl.keystore.location")
            key_pem, chain_pem = _pkcs12_key_and_chain(
                Path(location).read_bytes(), setting("ssl.keystore.password"), setting("ssl.key.password")
            )
            with _private_file(key_pem + chain_pem) as path:
                ctx.load_cert_chain(path)
        else:
            raise ConfigError(_unsupported_store("ssl.keystore.type", kind))
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: cannot load the TLS keystore: {exc}") from None


def _load_truststore(ctx: ssl.SSLContext, setting, where: str) -> bool:
    kind = (setting("ssl.truststore.type") or "PEM").upper()
    location, inline = setting("ssl.truststore.location"), setting("ssl.truststore.certificates")
    if not location and not inline:
        return False
    try:
        if kind == "PEM":
            if location:
                ctx.load_verify_locations(cafile=location)
            if inline:
                ctx.load_verify_locations(cadata=inline)
        elif kind == "PKCS12":
            if not location:
                raise ConfigError(f"{where}: ssl.truststore.type=PKCS12 needs ssl.truststore.location")
            ctx.load_verify_locations(
                cadata=_pkcs12_certificates(Path(location).read_bytes(), setting("ssl.truststore.password"))
            )
        else:
            raise ConfigError(_unsupported_store("ssl.truststore.type", kind))
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: cannot load the TLS truststore: {exc}") from None
    return True


def _no_password(where: str):
    def refuse() -> str:  # never let OpenSSL prompt on the terminal for a key's password
        raise ConfigError(f"{where}: the private key is encrypted; set ssl.key.password")

    return refuse


def _set_ciphers(ctx: ssl.SSLContext, suites: list[str], where: str) -> None:
    names = [s for s in suites if not s.startswith(_TLS13_SUITES)]
    if not names:
        return
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name in names:
        try:
            scratch.set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(
                f"{where}: ssl.cipher.suites: OpenSSL has no cipher {name!r} (brokkr takes OpenSSL's "
                "names, such as ECDHE-RSA-AES256-GCM-SHA384, not Java's TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)"
            ) from None
    ctx.set_ciphers(":".join(names))


def _unsupported_store(setting: str, kind: str) -> str:
    return (
        f"{setting}={kind} is not supported: brokkr reads PEM (and PKCS12 with the cryptography package); "
        "convert a JKS store with keytool -importkeystore -deststoretype PKCS12, or to PEM with openssl"
    )


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A file only this user can read, for ``load_cert_chain`` (which reads only files),
    removed as soon as the key is loaded."""
    fd, path = tempfile.mkstemp(prefix="brokkr-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


def _pkcs12():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(
            "PKCS12 stores need the cryptography package (pip install cryptography); or use ssl.keystore.type=PEM"
        ) from None
    return pkcs12, serialization


def _pkcs12_key_and_chain(data: bytes, store_password: str | None, key_password: str | None) -> tuple[str, str]:
    pkcs12, serialization = _pkcs12()
    password = store_password if store_password is not None else key_password
    key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    if key is None or cert is None:
        raise ConfigError("the PKCS12 keystore holds no private key with a certificate")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in (cert, *extra))
    return key_pem, chain


def _pkcs12_certificates(data: bytes, password: str | None) -> str:
    pkcs12, serialization = _pkcs12()
    _, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    certs = [c for c in (cert, *extra) if c is not None]
    if not certs:
        raise ConfigError("the PKCS12 truststore holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


# -- principals ---------------------------------------------------------------------------

# The attribute keywords Java's X500Principal.getName() (RFC 2253) prints by name.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def distinguished_name(certificate: Mapping[str, Any]) -> str:
    """A certificate's subject as Kafka's default principal builder names it (Java's
    ``X500Principal.getName()``, RFC 2253): most specific RDN first, ``CN=alice,O=example,C=NO``.

    ``certificate`` is what :meth:`ssl.SSLSocket.getpeercert` returns. Attributes without an
    RFC 2253 keyword keep OpenSSL's name (``emailAddress=...``), where Java would print
    their OID and DER bytes.
    """
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        rdns.append("+".join(f"{_KEYWORDS.get(attr, attr)}={_escape(value)}" for attr, value in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
