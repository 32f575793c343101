"""DescribeClientQuotas (key 48), versions 0-1: Kafka's ``ClientQuotasImage.describe``.

Needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED). Each filter
component names an entity type and how its name must match: exactly (match type 0, the
name in ``match``), the default (1), or any name, the default included (2). With
``strict`` the entity must have exactly the filtered types; otherwise it may have more.
An empty, repeated or unknown type, a ``match`` that contradicts the match type, and ``ip``
combined with user or client-id answer INVALID_REQUEST (an unknown type
UNSUPPORTED_VERSION), with Kafka's messages.
"""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..quotas import CLIENT_ID, IP, USER
from . import Api
from .alter_client_quotas import quota_store

KEY = 48
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_R = response_spec(KEY)
DescribeClientQuotasResponse = _R.cls
EntryData = _R.struct("EntryData")
EntityData = _R.struct("EntityData")
ValueData = _R.struct("ValueData")


class _FilterError(Exception):
    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST):
        super().__init__(message)
        self.code = code


def _parse_filter(components) -> tuple[dict[str, str | None], set[str]]:
    """(exact names by type, None for the default; types that must merely be present)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for c in components:
        kind = c.entity_type
        if not kind:
            raise _FilterError("Invalid empty entity type.")
        if kind in exact or kind in present:
            raise _FilterError(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (IP, USER, CLIENT_ID):
            raise _FilterError(f"Unsupported entity type {kind}", ErrorCode.UNSUPPORTED_VERSION)
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _FilterError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise _FilterError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise _FilterError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(kind)
        else:
            raise _FilterError(f"Unknown match type {c.match_type}")
    kinds = exact.keys() | present
    if IP in kinds and (USER in kinds or CLIENT_ID in kinds):
        raise _FilterError(
            "Invalid entity filter component combination. IP filter component should not be used with user or "
            "clientId filter component."
        )
    return exact, present


def _matches(entity: dict, exact: dict, present: set, strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(present):
        return False
    return all(k in entity and entity[k] == name for k, name in exact.items()) and all(k in entity for k in present)


async def handle(broker, ctx, request):
    store, error = quota_store(broker, ctx, AclOperation.DESCRIBE_CONFIGS)
    if error:
        return error_response(request, *error)
    try:
        exact, present = _parse_filter(request.components)
    except _FilterError as exc:
        return error_response(request, exc.code, str(exc))
    entries = [
        EntryData(
            entity=[EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
            values=[ValueData(key=k, value=float(v)) for k, v in sorted(values.items())],
        )
        for entity, values in sorted(store.quotas().items(), key=str)
        if _matches(dict(entity), exact, present, request.strict)
    ]
    return DescribeClientQuotasResponse(error_code=ErrorCode.NONE, error_message=None, entries=entries)


def error_response(request, code, message=None):
    return DescribeClientQuotasResponse(error_code=code, error_message=message, entries=None)


API = Api(KEY, 0, 1, handle, error_response)
