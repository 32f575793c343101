"""Confluent Schema Registry's REST API (aiohttp), as its clients use it.

Every answer is JSON of content type ``application/vnd.schemaregistry.v1+json``; errors
are ``{"error_code", "message"}`` with Confluent's codes (:mod:`.errors`). Paths are
split on their raw form and each segment unquoted, so a subject may hold any character
(clients send ``/`` as ``%2F``).

Reads are answered by any broker from its replica of ``_schemas`` (caught up to its high
watermark first); a broker holding no replica forwards them to the leader's registry, as
it does every write. A broker finds the leader's registry in the cluster membership:
each publishes its registry's URL in its broker registration (``Broker.services``,
``schema-registry``). A forwarded request that reaches a broker that does not lead (the
leadership moved meanwhile) answers 50003 rather than forwarding again.

Security: with basic authentication (``brokkr.schema.registry.authentication.method``,
BASIC by default where the broker has a SASL listener with a SCRAM mechanism), every
request needs HTTP basic credentials of a SCRAM user of the broker; the password is
checked by deriving the user's stored key from its salt and iterations. Every request is
then authorized by the broker's authorizer, as operations on the ``_schemas`` topic:
reads READ, registering WRITE, deletes DELETE, changing /config and /mode ALTER_CONFIGS.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.context import ANONYMOUS, ConnectionInfo, Principal, RequestContext
from brokkr.core.scram import ScramMechanism, scram_credentials

from . import errors, operations
from .errors import RegistryError
from .formats import FORMATS
from .store import SchemaRegistry

log = logging.getLogger("brokkr.schema_registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SERVICE = "schema-registry"  # the name of its URL in Broker.services
FORWARDED = "X-Brokkr-Forwarded"
#: Bodies above this many bytes are parsed on the registry's threads.
PARSE_INLINE_BYTES = 64 * 1024

READ, WRITE, DELETE, CONFIGURE = AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER_CONFIGS
OPERATION_NAMES = {READ: "Read", WRITE: "Write", DELETE: "Delete", CONFIGURE: "AlterConfigs"}


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"  # clients send True/true


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        return default


def _page(request: web.Request, items: list) -> list:
    offset, limit = max(_int(request, "offset", 0), 0), _int(request, "limit", -1)
    items = items[offset:]
    return items[:limit] if limit > 0 else items


class Route:
    def __init__(self, method: str, path: str, handler: Callable, operation: AclOperation, write: bool = False):
        self.method, self.handler, self.operation, self.write = method, handler, operation, write
        self.segments = tuple(path.strip("/").split("/")) if path != "/" else ()

    def match(self, segments: list[str]) -> dict[str, str] | None:
        if len(segments) != len(self.segments):
            return None
        params = {}
        for pattern, segment in zip(self.segments, segments):
            if pattern.startswith("{"):
                params[pattern[1:-1]] = segment
            elif pattern != segment:
                return None
        return params


class BasicAuth:
    """HTTP basic credentials checked against the broker's SCRAM credentials."""

    CACHE = 1024  # verified (user, password digest) pairs kept

    def __init__(self, registry: SchemaRegistry):
        self.registry = registry
        self._verified: collections.OrderedDict = collections.OrderedDict()

    async def principal(self, header: str | None) -> Principal:
        if not header or not header.startswith("Basic "):
            raise _unauthorized()
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise _unauthorized() from None
        if not sep or not user:
            raise _unauthorized()
        credentials = tuple(
            sorted(scram_credentials(self.registry.broker).of(user).items(), key=lambda i: i[0].type_id)
        )
        key = (user, hashlib.sha256(password.encode()).digest())
        if self._verified.get(key) != credentials or not credentials:
            if not await self.registry.run(_verify, credentials, password.encode()):
                raise _unauthorized()
            self._verified[key] = credentials
            while len(self._verified) > self.CACHE:
                self._verified.popitem(last=False)
        self._verified.move_to_end(key)
        return Principal("User", user)


_DUMMY = (ScramMechanism.SCRAM_SHA_256, b"brokkr-no-such-user", 4096)


def _verify(credentials: tuple, password: bytes) -> bool:
    """Whether ``password`` derives the stored key of one of the user's credentials (an
    unknown user costs one derivation too, so that timing does not tell users apart)."""
    if not credentials:
        mechanism, salt, iterations = _DUMMY
        mechanism.salted_password(password, salt, iterations)
        return False
    for mechanism, credential in credentials:
        salted = mechanism.salted_password(password, credential.salt, credential.iterations)
        stored = mechanism.hash(mechanism.hmac(salted, b"Client Key"))
        if hmac.compare_digest(stored, credential.stored_key):
            return True
    return False


def _unauthorized() -> RegistryError:
    return RegistryError(401, 401, "Unauthorized")


class RegistryApi:
    """The handlers of one broker's registry, and how requests reach them."""

    def __init__(self, registry: SchemaRegistry, auth: BasicAuth | None, max_request_bytes: int, https: bool):
        self.registry = registry
        self.broker = registry.broker
        self.auth = auth
        self.max_request_bytes = max_request_bytes
        self.https = https
        self._client: ClientSession | None = None
        r = Route
        self.routes = [
            r("GET", "/", self.root, READ),
            r("GET", "/subjects", self.list_subjects, READ),
            r("GET", "/subjects/{subject}/versions", self.list_versions, READ),
            r("POST", "/subjects/{subject}/versions", self.register, WRITE, write=True),
            r("GET", "/subjects/{subject}/versions/{version}", self.get_version, READ),
            r("GET", "/subjects/{subject}/versions/{version}/schema", self.get_version_schema, READ),
            r("GET", "/subjects/{subject}/versions/{version}/referencedby", self.referenced_by, READ),
            r("DELETE", "/subjects/{subject}/versions/{version}", self.delete_version, DELETE, write=True),
            r("POST", "/subjects/{subject}", self.lookup, READ),
            r("DELETE", "/subjects/{subject}", self.delete_subject, DELETE, write=True),
            r("GET", "/subjects/{subject}/metadata", self.latest_with_metadata, READ),
            r("GET", "/schemas", self.list_schemas, READ),
            r("GET", "/schemas/types", self.schema_types, READ),
            r("GET", "/schemas/ids/{id}", self.get_schema, READ),
            r("GET", "/schemas/ids/{id}/schema", self.get_schema_text, READ),
            r("GET", "/schemas/ids/{id}/subjects", self.id_subjects, READ),
            r("GET", "/schemas/ids/{id}/versions", self.id_versions, READ),
            r("GET", "/config", self.get_config, READ),
            r("PUT", "/config", self.set_config, CONFIGURE, write=True),
            r("DELETE", "/config", self.delete_config, CONFIGURE, write=True),
            r("GET", "/config/{subject}", self.get_config, READ),
            r("PUT", "/config/{subject}", self.set_config, CONFIGURE, write=True),
            r("DELETE", "/config/{subject}", self.delete_config, CONFIGURE, write=True),
            r("GET", "/mode", self.get_mode, READ),
            r("PUT", "/mode", self.set_mode, CONFIGURE, write=True),
            r("DELETE", "/mode", self.delete_mode, CONFIGURE, write=True),
            r("GET", "/mode/{subject}", self.get_mode, READ),
            r("PUT", "/mode/{subject}", self.set_mode, CONFIGURE, write=True),
            r("DELETE", "/mode/{subject}", self.delete_mode, CONFIGURE, write=True),
            r("POST", "/compatibility/subjects/{subject}/versions", self.test_compatibility, READ),
            r("POST", "/compatibility/subjects/{subject}/versions/{version}", self.test_compatibility, READ),
            r("GET", "/contexts", self.contexts, READ),
        ]

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    # -- dispatch -----------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except RegistryError as exc:
            return self._error(exc)
        except web.HTTPRequestEntityTooLarge:
            return self._error(RegistryError(413, 413, f"Request body larger than {self.max_request_bytes} bytes"))
        except Exception:
            log.exception("schema registry: %s %s failed", request.method, request.path)
            return self._error(RegistryError(500, 500, "Internal Server Error"))

    def _error(self, exc: RegistryError) -> web.Response:
        response = _json_response(exc.body(), exc.status)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = 'Basic realm="brokkr"'
        return response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.rel_url.raw_path
        segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        allowed = False
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            allowed = True
            if route.method == request.method:
                break
        else:
            if allowed:
                raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
            raise RegistryError(404, 404, "HTTP 404 Not Found")
        principal = await self.auth.principal(request.headers.get("Authorization")) if self.auth else ANONYMOUS
        self._authorize(request, principal, route.operation)
        body = await self._body(request) if request.method in ("POST", "PUT") else None
        if route.write:
            forward_to = await self._write_target(request)
        else:
            forward_to = self._read_target()
        if forward_to is not None:
            return await self._forward(request, forward_to)
        if route.write:
            async with self.registry.write_lock:
                await self.registry.caught_up()
                if not self.registry.is_leader():
                    raise errors.unknown_leader("Leader not known.")
                answer = await route.handler(request, params, body)
        else:
            await self.registry.caught_up()
            answer = await route.handler(request, params, body)
        if isinstance(answer, web.StreamResponse):
            return answer
        return _json_response(answer, 200)

    def _authorize(self, request: web.Request, principal: Principal, operation: AclOperation) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        host, port = (peer[0], peer[1]) if peer else ("", 0)
        protocol = (
            ("SASL_SSL" if self.https else "SASL_PLAINTEXT") if self.auth else ("SSL" if self.https else "PLAINTEXT")
        )
        connection = ConnectionInfo(f"schema-registry-{host}:{port}", "SCHEMA_REGISTRY", protocol, host, port)
        ctx = RequestContext(connection, principal, -1, 0, "schema-registry", 0)
        topic = self.registry.topic
        if not self.broker.authorize(ctx, [Action(operation, ResourceType.TOPIC, topic)])[0]:
            raise RegistryError(403, 40301, f"User is denied operation {OPERATION_NAMES[operation]} on Topic: {topic}")

    async def _body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > self.max_request_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=self.max_request_bytes, actual_size=request.content_length)
        raw = await request.read()
        if not raw:
            return None
        try:
            if len(raw) > PARSE_INLINE_BYTES:
                return await self.registry.run(json.loads, raw)
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise RegistryError(400, 400, f"Unexpected character or malformed JSON: {exc}") from None

    # -- reads where the replica is, writes at the leader ---------------------------------

    def _cluster_topic_exists(self) -> bool:
        replicas = self.broker.replicas
        return replicas is not None and self.registry.topic in replicas.membership.topics()

    def _read_target(self) -> str | None:
        """Where a read is answered: here (None) when this broker holds a replica of
        ``_schemas`` (or nobody does yet), else the leader's registry."""
        if self.registry.local_partition() is not None or not self._cluster_topic_exists():
            return None
        return self._leader_url()

    def _leader_url(self) -> str:
        membership = self.broker.replicas.membership
        state = membership.partition_state(self.registry.topic, 0)
        leader = state.leader if state is not None else -1
        info = membership.brokers().get(leader) if leader >= 0 else None
        url = dict(info.services).get(SERVICE) if info is not None else None
        if url is None:
            raise errors.unknown_leader("Leader not known.")
        return url

    async def _write_target(self, request: web.Request) -> str | None:
        """Where a write is made: here (None) at the leader of ``_schemas`` (created first
        if it does not exist yet), else the leader's registry."""
        registry = self.registry
        await self._ensure_topic()
        if registry.is_leader() or self.broker.replicas is None:
            await registry.wait_loaded()
            return None
        if request.headers.get(FORWARDED):
            raise errors.forwarding_failed("Error while forwarding the request to the leader: it no longer leads")
        state = self.broker.replicas.membership.partition_state(registry.topic, 0)
        if state is not None and state.leader == self.broker.node_id:  # leads, still loading
            await registry.wait_loaded()
            return None
        return self._leader_url()

    async def _ensure_topic(self) -> None:
        registry = self.registry
        exists = self._cluster_topic_exists() if self.broker.replicas is not None else registry.local_partition()
        if not exists:
            registry.create_topic()
            await registry.wait_loaded()
        if self.broker.replicas is None:
            if registry.local_partition() is None:
                raise errors.store_error(f"Error while creating the topic {registry.topic}; see the broker's log")
            return
        # On a cluster the controller elects a leader of the new topic: wait for it.
        deadline = time.monotonic() + self.broker.config[registry.write_timeout] / 1000
        membership = self.broker.replicas.membership
        while True:
            state = membership.partition_state(registry.topic, 0)
            if state is not None and state.leader >= 0:
                return
            if time.monotonic() > deadline:
                if registry.topic not in membership.topics():
                    raise errors.store_error(f"Error while creating the topic {registry.topic}; see the broker's log")
                raise errors.unknown_leader("Leader not known.")
            await asyncio.sleep(0.05)

    async def _forward(self, request: web.Request, base_url: str) -> web.Response:
        if self._client is None:
            self._client = ClientSession(
                timeout=ClientTimeout(total=self.broker.config[self.registry.write_timeout] / 1000 + 30)
            )
        headers = {FORWARDED: str(self.broker.node_id)}
        for name in ("Authorization", "Content-Type", "Accept"):
            if name in request.headers:
                headers[name] = request.headers[name]
        body = await request.read() if request.method in ("POST", "PUT") else None
        try:
            async with self._client.request(
                request.method, base_url.rstrip("/") + request.rel_url.raw_path_qs, data=body, headers=headers
            ) as answer:
                data = await answer.read()
                content_type = answer.headers.get("Content-Type", CONTENT_TYPE)
                return web.Response(status=answer.status, body=data, headers={"Content-Type": content_type})
        except (TimeoutError, ClientError) as exc:
            raise errors.forwarding_failed(f"Error while forwarding the request to the leader: {exc}") from None

    # -- handlers ----------------------------------------------------------------------

    @property
    def state(self):
        return self.registry.state

    def _version(self, subject: str, version_text: str, deleted: bool):
        version = operations.parse_version(version_text)
        sv = self.state.version(subject, version, deleted)
        if sv is None:
            if not self.state.versions(subject, deleted):
                raise errors.subject_not_found(subject)
            raise errors.version_not_found(version)
        return sv

    async def _formatted(self, request: web.Request, sv) -> dict:
        entity = operations.schema_entity(self.registry, sv)
        if request.query.get("format") == "serialized":  # PROTOBUF's base64 FileDescriptorProto
            entity["schema"] = await self._serialized(self.state.schemas[sv.id], entity["schema"])
        return entity

    async def _serialized(self, content, text: str) -> str:
        parsed = await operations._parsed(self.registry, content)
        serialized = getattr(parsed, "serialized", None)
        return await self.registry.run(serialized) if serialized is not None else text

    async def root(self, request, params, body):
        return {}

    async def contexts(self, request, params, body):
        return ["."]

    async def list_subjects(self, request, params, body):
        prefix = request.query.get("subjectPrefix", "")
        deleted, deleted_only = _flag(request, "deleted"), _flag(request, "deletedOnly")
        found = []
        for subject in sorted(self.state.subjects):
            if not subject.startswith(prefix):
                continue
            live = bool(self.state.versions(subject))
            if (deleted_only and not live) or (not deleted_only and (live or deleted)):
                found.append(subject)
        return _page(request, found)

    async def list_versions(self, request, params, body):
        subject = params["subject"]
        deleted, deleted_only = _flag(request, "deleted"), _flag(request, "deletedOnly")
        versions = self.state.versions(subject, deleted or deleted_only)
        if not versions:
            raise errors.subject_not_found(subject)
        if deleted_only:
            versions = [sv for sv in versions if sv.deleted]
        return _page(request, [sv.version for sv in versions])

    async def get_version(self, request, params, body):
        sv = self._version(params["subject"], params["version"], _flag(request, "deleted"))
        return await self._formatted(request, sv)

    async def get_version_schema(self, request, params, body):
        sv = self._version(params["subject"], params["version"], _flag(request, "deleted"))
        return _raw_response((await self._formatted(request, sv))["schema"])

    async def referenced_by(self, request, params, body):
        sv = self._version(params["subject"], params["version"], True)
        ids = sorted(
            {holder.id for holder in self.state.referenced_by(sv.subject, sv.version, _flag(request, "deleted"))}
        )
        return _page(request, ids)

    async def latest_with_metadata(self, request, params, body):
        subject = params["subject"]
        wanted = dict(zip(request.query.getall("key", []), request.query.getall("value", [])))
        versions = self.state.versions(subject, _flag(request, "deleted"))
        if not versions:
            raise errors.subject_not_found(subject)
        for sv in reversed(versions):
            metadata = self.state.schemas[sv.id].metadata or {}
            properties = metadata.get("properties") or {}
            if all(properties.get(k) == v for k, v in wanted.items()):
                return await self._formatted(request, sv)
        raise errors.schema_not_found()

    async def register(self, request, params, body):
        return await operations.register(self.registry, params["subject"], body, _flag(request, "normalize"))

    async def lookup(self, request, params, body):
        return await operations.lookup(
            self.registry, params["subject"], body, _flag(request, "normalize"), _flag(request, "deleted")
        )

    async def delete_version(self, request, params, body):
        return await operations.delete_version(
            self.registry, params["subject"], params["version"], _flag(request, "permanent")
        )

    async def delete_subject(self, request, params, body):
        return await operations.delete_subject(self.registry, params["subject"], _flag(request, "permanent"))

    async def list_schemas(self, request, params, body):
        prefix = request.query.get("subjectPrefix", "")
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        found = []
        for subject in sorted(self.state.subjects):
            if subject.startswith(prefix):
                versions = self.state.versions(subject, deleted)
                found += [
                    operations.schema_entity(self.registry, sv) for sv in (versions[-1:] if latest_only else versions)
                ]
        return _page(request, found)

    async def schema_types(self, request, params, body):
        return sorted(FORMATS)

    def _content(self, id_text: str):
        try:
            schema_id = int(id_text)
        except ValueError:
            raise RegistryError(404, 404, "HTTP 404 Not Found") from None
        content = self.state.schemas.get(schema_id)
        if content is None:
            raise errors.schema_not_found(schema_id)
        return content

    async def get_schema(self, request, params, body):
        content = self._content(params["id"])
        answer = content.to_json()
        if request.query.get("format") == "serialized":
            answer["schema"] = await self._serialized(content, answer["schema"])
        if _flag(request, "fetchMaxId"):
            answer["maxId"] = self.state.max_id
        return answer

    async def get_schema_text(self, request, params, body):
        content = self._content(params["id"])
        text = content.schema
        if request.query.get("format") == "serialized":
            text = await self._serialized(content, text)
        return _raw_response(text)

    def _holders(self, request, params):
        content = self._content(params["id"])
        deleted, subject = _flag(request, "deleted"), request.query.get("subject")
        holders = sorted(self.state.holders.get(content.id, ()))
        found = []
        for s, v in holders:
            sv = self.state.version(s, v, deleted)
            if sv is not None and (subject is None or s == subject):
                found.append(sv)
        return found

    async def id_subjects(self, request, params, body):
        return _page(request, list(dict.fromkeys(sv.subject for sv in self._holders(request, params))))

    async def id_versions(self, request, params, body):
        return _page(request, [{"subject": sv.subject, "version": sv.version} for sv in self._holders(request, params)])

    async def get_config(self, request, params, body):
        subject = params.get("subject")
        if subject is None:
            return operations.config_of(self.registry, None)
        if _flag(request, "defaultToGlobal"):
            return operations.config_of(self.registry, subject)
        config = self.state.configs.get(subject)
        if config is None:
            raise errors.subject_config_not_set(subject)
        return config

    async def set_config(self, request, params, body):
        return await operations.set_config(self.registry, params.get("subject"), body)

    async def delete_config(self, request, params, body):
        return await operations.delete_config(self.registry, params.get("subject"))

    async def get_mode(self, request, params, body):
        subject = params.get("subject")
        if subject is None or _flag(request, "defaultToGlobal"):
            return {"mode": operations.mode_of(self.registry, subject)}
        mode = self.state.modes.get(subject)
        if mode is None:
            raise errors.subject_mode_not_set(subject)
        return {"mode": mode}

    async def set_mode(self, request, params, body):
        return await operations.set_mode(self.registry, params.get("subject"), body, _flag(request, "force"))

    async def delete_mode(self, request, params, body):
        return await operations.delete_mode(self.registry, params.get("subject"))

    async def test_compatibility(self, request, params, body):
        return await operations.test_compatibility(
            self.registry,
            params["subject"],
            params.get("version"),
            body,
            _flag(request, "normalize"),
            _flag(request, "verbose"),
        )


def _json_response(value: Any, status: int) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(value, ensure_ascii=False).encode(), headers={"Content-Type": CONTENT_TYPE}
    )


def _raw_response(text: str) -> web.Response:
    """The schema text itself (Confluent's ``.../schema`` endpoints answer it unquoted)."""
    return web.Response(status=200, body=text.encode(), headers={"Content-Type": CONTENT_TYPE})
