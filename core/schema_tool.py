"""``brokkr schemas``: the schema registry of a running broker (or any registry speaking
Confluent's REST API), over plain HTTP: list subjects and their versions, register a
schema from a file, test one for compatibility, delete (soft, or ``--permanent``), and
read or set compatibility levels.

Credentials: ``--user`` (the password from ``--password``, else asked for, or read from
standard input), or ``--command-config FILE``, a properties file with Confluent's client
settings: ``basic.auth.user.info=USER:PASSWORD`` and, for an ``https://`` URL,
``ssl.ca.location`` (and ``ssl.certificate.location``/``ssl.key.location`` for a client
certificate); each also with the ``schema.registry.`` prefix. A registry's error is
printed as ``Error: <error code> <message>`` with status 1; an unreachable URL is named,
with status 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

from .config import read_properties
from .errors import ConfigError

TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30
#: Confluent's codes for a subject or version already soft-deleted (a permanent delete follows).
SOFT_DELETED = (40404, 40406)


class RegistryError(Exception):
    """A registry's error answer: ``Error: <code> <message>``, status 1."""

    exit_status = 1


def add_parser(sub) -> None:
    """``brokkr schemas`` and its actions (called by ``brokkr.core.cli``)."""
    schemas = sub.add_parser("schemas", help="list, register, test, delete schemas and set levels in a schema registry")
    schemas.add_argument("--url", required=True, help="the registry, e.g. http://127.0.0.1:8081")
    schemas.add_argument("--user", help="HTTP basic auth user (a SCRAM user of the broker)")
    schemas.add_argument("--password", help="with --user (default: asked for, or read from standard input)")
    schemas.add_argument("--command-config", metavar="FILE", help="basic.auth.user.info, ssl.ca.location, ...")
    actions = schemas.add_subparsers(dest="action", required=True)
    listed = actions.add_parser("list", help="subjects and their versions")
    listed.add_argument("--subject", help="only this subject")
    listed.add_argument("--deleted", action="store_true", help="soft-deleted subjects and versions too")
    for name, text in (("register", "register a schema under a subject"), ("compatibility", "test a schema")):
        p = actions.add_parser(name, help=text)
        p.add_argument("subject")
        p.add_argument("--schema-file", required=True, metavar="FILE", help="the schema (.avsc, .json, .proto)")
        p.add_argument("--type", choices=TYPES, default="AVRO", help="the schema's type (default AVRO)")
        p.add_argument(
            "--reference", action="append", metavar="NAME=SUBJECT:VERSION", help="a referenced schema; repeatable"
        )
        if name == "register":
            p.add_argument("--normalize", action="store_true", help="register the normalized schema")
        else:
            p.add_argument("--version", default="latest", help="the version to test against (default latest)")
    delete = actions.add_parser("delete", help="delete a subject, or one version (soft, unless --permanent)")
    delete.add_argument("subject")
    delete.add_argument("--version", help="only this version (a number, or latest)")
    delete.add_argument("--permanent", action="store_true", help="delete for good (soft-deleting first)")
    config = actions.add_parser("config", help="the compatibility level (global, or of a subject), or --set it")
    config.add_argument("subject", nargs="?", help="the subject (default: the global level)")
    config.add_argument("--set", choices=LEVELS, metavar="LEVEL", help=f"set it: {', '.join(LEVELS)}")
    schemas.set_defaults(func=schemas_command)


def schemas_command(args: argparse.Namespace) -> int:
    client = RegistryClient(args.url, *_credentials(args))
    try:
        return ACTIONS[args.action](client, args)
    except RegistryError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


class RegistryClient:
    """Requests to one registry: JSON in and out, Confluent's content type."""

    def __init__(self, url: str, auth: tuple[str, str] | None, context: ssl.SSLContext | None):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"--url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        self.url = url.rstrip("/")
        self.headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
        self.context = context

    def call(self, method: str, path: str, body=None, **query):
        """The JSON answer to ``method path?query``; raises RegistryError for an error
        answer, OSError (naming the URL) when the registry cannot be reached."""
        url = self.url + path
        given = {k: v for k, v in query.items() if v is not None}
        if given:
            url += "?" + urllib.parse.urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in given.items()}
            )
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data, self.headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self.context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise RegistryError(_error_of(exc)) from None
        except urllib.error.URLError as exc:
            raise OSError(f"cannot reach the schema registry at {self.url}: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise OSError(f"cannot reach the schema registry at {self.url}: {exc}") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    """``<error code> <message>`` from Confluent's error body, else the HTTP status."""
    raw = exc.read()
    try:
        body = json.loads(raw)
        return f"{body['error_code']} {body['message']}"
    except (ValueError, KeyError, TypeError):
        text = raw.decode("utf-8", "replace").strip()[:500]
        return f"HTTP {exc.code} {exc.reason}" + (f": {text}" if text else "")


def _credentials(args: argparse.Namespace) -> tuple[tuple[str, str] | None, ssl.SSLContext | None]:
    settings = read_properties(args.command_config) if args.command_config else {}

    def setting(name: str) -> str | None:
        return settings.get(f"schema.registry.{name}", settings.get(name))

    auth = None
    if args.user is not None:
        if args.password is not None:
            password = args.password
        else:
            from .cli import _read_password

            password = _read_password(args.user)
        auth = (args.user, password)
    elif setting("basic.auth.user.info"):
        user, sep, password = setting("basic.auth.user.info").partition(":")
        if not sep:
            raise ConfigError(f"{args.command_config}: basic.auth.user.info must be USER:PASSWORD")
        auth = (user, password)
    context = None
    if args.url.startswith("https://"):
        context = ssl.create_default_context(cafile=setting("ssl.ca.location"))
        if setting("ssl.certificate.location"):
            context.load_cert_chain(setting("ssl.certificate.location"), setting("ssl.key.location"))
    return auth, context


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _list(client: RegistryClient, args: argparse.Namespace) -> int:
    subjects = [args.subject] if args.subject else client.call("GET", "/subjects", deleted=args.deleted or None)
    for subject in sorted(subjects):
        versions = client.call("GET", f"/subjects/{_quoted(subject)}/versions", deleted=args.deleted or None)
        print(f"{subject}\t{','.join(str(v) for v in versions)}")
    return 0


def _schema_body(args: argparse.Namespace) -> dict:
    with open(args.schema_file, encoding="utf-8") as f:
        body: dict = {"schema": f.read()}
    if args.type != "AVRO":
        body["schemaType"] = args.type
    references = []
    for given in args.reference or ():
        name, _, where = given.partition("=")
        subject, _, version = where.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise ConfigError(f"--reference {given!r}: expected NAME=SUBJECT:VERSION")
        references.append({"name": name, "subject": subject, "version": int(version)})
    if references:
        body["references"] = references
    return body


def _register(client: RegistryClient, args: argparse.Namespace) -> int:
    answer = client.call(
        "POST", f"/subjects/{_quoted(args.subject)}/versions", _schema_body(args), normalize=args.normalize or None
    )
    print(f"Successfully registered schema with ID: {answer['id']}")
    return 0


def _compatibility(client: RegistryClient, args: argparse.Namespace) -> int:
    path = f"/compatibility/subjects/{_quoted(args.subject)}/versions/{_quoted(args.version)}"
    answer = client.call("POST", path, _schema_body(args), verbose=True)
    if answer.get("is_compatible"):
        print("Compatible")
        return 0
    print("Incompatible")
    for message in answer.get("messages") or ():
        print(f"  {message}")
    return 1


def _delete(client: RegistryClient, args: argparse.Namespace) -> int:
    path = f"/subjects/{_quoted(args.subject)}"
    if args.version is not None:
        path += f"/versions/{_quoted(args.version)}"
    try:
        deleted = client.call("DELETE", path)
    except RegistryError as exc:
        if not args.permanent or not str(exc).startswith(tuple(f"{code} " for code in SOFT_DELETED)):
            raise
    if args.permanent:  # Confluent's registry deletes for good only what is soft-deleted
        deleted = client.call("DELETE", path, permanent=True)
    versions = deleted if isinstance(deleted, list) else [deleted]
    how = "permanently" if args.permanent else "soft"
    print(f"Deleted ({how}) version(s) {', '.join(str(v) for v in versions)} of subject {args.subject}")
    return 0


def _config(client: RegistryClient, args: argparse.Namespace) -> int:
    path = "/config" + (f"/{_quoted(args.subject)}" if args.subject else "")
    if args.set is not None:
        answer = client.call("PUT", path, {"compatibility": args.set})
        print(answer.get("compatibility", args.set))
        return 0
    answer = client.call("GET", path, defaultToGlobal=True if args.subject else None)
    print(answer.get("compatibilityLevel") or answer.get("compatibility"))
    return 0


ACTIONS = {
    "list": _list,
    "register": _register,
    "compatibility": _compatibility,
    "delete": _delete,
    "config": _config,
}
