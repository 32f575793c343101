"""DeleteGroups (key 42), versions 0-2: remove Empty groups with their offsets (tombstones
in ``__consumer_offsets``). A group with members answers NON_EMPTY_GROUP, an unknown one
GROUP_ID_NOT_FOUND. Needs DELETE on each group."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ...coordinator_partitions import write_error
from .. import coordinator_of
from ..classic import ClassicState
from . import group_allowed

KEY = 42
_R = response_spec(KEY)
DeleteGroupsResponse = _R.cls
DeletableGroupResult = _R.struct("DeletableGroupResult")


async def _delete(coordinator, group_id: str) -> ErrorCode:
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    error = coordinator.check_coordinator(group_id)
    if error:
        return error
    group = coordinator.groups.get(group_id)
    if group is None or group.state is ClassicState.DEAD:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if group.state_name != ClassicState.EMPTY.value:
        return ErrorCode.NON_EMPTY_GROUP
    error = await coordinator.delete_group(group_id)
    return write_error(error)


async def handle(broker, ctx, request):
    coordinator = coordinator_of(broker)
    allowed = group_allowed(broker, ctx, AclOperation.DELETE, request.groups_names)
    results = []
    for group_id, ok in zip(request.groups_names, allowed, strict=True):
        error = await _delete(coordinator, group_id) if ok else ErrorCode.GROUP_AUTHORIZATION_FAILED
        results.append(DeletableGroupResult(group_id=group_id, error_code=error))
    return DeleteGroupsResponse(results=results)


def error_response(request, code):
    return DeleteGroupsResponse(
        results=[DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names]
    )


API = Api(KEY, 0, 2, handle, error_response)
