"""AlterClientQuotas (key 49), versions 0-1: Kafka's ``ClientQuotaControlManager.alterClientQuotas``.

Needs ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every entry).
Each entry is checked on its own, with Kafka's messages (INVALID_REQUEST): an entity of
a user, a client id or both, each named (non-empty) or the default (null name); no key
twice; a set value must be a key of :data:`brokkr.core.quotas.QUOTA_KEYS`, above 0, and
whole for the byte rates. A removal (``remove=true``) of a key not set is a no-op.
Kafka's ``ip`` entities (connection_creation_rate) and ``controller_mutation_rate`` are
refused, since brokkr does not enforce them. With ``validate_only`` nothing changes; else
the valid entries are applied together and persisted before the response.
"""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..quotas import CLIENT_ID, IP, QUOTA_KEYS, USER, entity_path, quota_entity
from ..shared_documents import settled
from . import Api
from .common import cluster_store

KEY = 49
_R = response_spec(KEY)
AlterClientQuotasResponse = _R.cls
EntryData = _R.struct("EntryData")
EntityData = _R.struct("EntityData")
LONG_MAX = 2**63 - 1
#: Keys Kafka accepts for user and client-id entities that brokkr does not enforce.
UNENFORCED_KEYS = ("controller_mutation_rate",)


NO_STORE = (ErrorCode.INVALID_REQUEST, "No plugin keeps client quotas (brokkr.plugins.quota.client_quotas disabled?)")


def quota_store(broker, ctx, operation: AclOperation):
    """The client quota store once the request may perform ``operation`` on the cluster
    (ALTER_CONFIGS to change quotas, DESCRIBE_CONFIGS to list them)."""
    return cluster_store(broker, ctx, operation, broker.hook.brokkr_client_quota_store, NO_STORE)


def _invalid_entity(pairs: list[tuple[str, str | None]]) -> str | None:
    """Kafka's ``validateEntity`` and ``configKeysForEntityType``."""
    if not pairs:
        return "Invalid empty client quota entity"
    seen = set()
    for kind, name in pairs:
        if kind in seen:
            return f"Invalid client quota entity, duplicate entity entry {kind}"
        seen.add(kind)
        if kind not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {kind}"
        if name == "":
            return f"Empty {kind} not supported"
    if IP in seen:
        if len(seen) > 1:
            return "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        return "brokkr does not enforce connection_creation_rate, so it keeps no quotas for ip entities"
    return None


def _invalid_value(key: str, value: float) -> str | None:
    """Kafka's ``validateQuotaKeyValue``."""
    if key in UNENFORCED_KEYS:
        return f"brokkr does not enforce {key}, so it does not keep it"
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0:
        return f"Quota {key} must be greater than 0"
    if kind is int:
        if value > LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


async def handle(broker, ctx, request):
    store, error = quota_store(broker, ctx, AclOperation.ALTER_CONFIGS)
    if error:
        return error_response(request, *error)
    changes: dict = {}
    results = []
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        entity = quota_entity(pairs)
        ops: dict[str, float | None] = {}
        message = _invalid_entity(pairs)
        if message is None and entity in changes:
            message = f"Ignoring duplicate entity {entity_path(entity)}"
        for op in entry.ops if message is None else ():
            if op.key in ops:
                message = f"Duplicate quota key {op.key} not updating quota for this entity {entity_path(entity)}"
            elif not op.remove:
                message = _invalid_value(op.key, op.value)
            if message is not None:
                break
            ops[op.key] = None if op.remove else (int(op.value + 1e-6) if QUOTA_KEYS[op.key] is int else op.value)
        code = ErrorCode.NONE if message is None else ErrorCode.INVALID_REQUEST
        results.append(EntryData(error_code=code, error_message=message, entity=_entity_data(entry)))
        if message is None:
            changes[entity] = ops
    if changes and not request.validate_only:
        await settled(store.alter(changes))
    return AlterClientQuotasResponse(entries=results)


def _entity_data(entry) -> list:
    return [EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]


def error_response(request, code, message=None):
    return AlterClientQuotasResponse(
        entries=[EntryData(error_code=code, error_message=message, entity=_entity_data(e)) for e in request.entries]
    )


API = Api(KEY, 0, 1, handle, error_response)
