"""ListGroups (key 16), versions 0-5: the groups this coordinator holds, filtered by state
(v4) and type (v5, ``classic``, ``consumer`` or ``share``). DESCRIBE on the cluster lists every
group; otherwise only those the principal may DESCRIBE."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 16
_R = response_spec(KEY)
ListGroupsResponse = _R.cls
ListedGroup = _R.struct("ListedGroup")


def protocol_type_of(group) -> str:
    return group.protocol_type or ""


async def handle(broker, ctx, request):
    coordinator = coordinator_of(broker)
    states = {s.lower() for s in request.states_filter or ()}
    types = {t.lower() for t in request.types_filter or ()}
    groups = [
        g
        for g in coordinator.groups.values()
        if (not states or g.state_name.lower() in states) and (not types or g.type in types)
    ]
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        allowed = group_allowed(broker, ctx, AclOperation.DESCRIBE, [g.group_id for g in groups])
        groups = [g for g, ok in zip(groups, allowed, strict=True) if ok]
    loading = any(not loaded for loaded, _ in coordinator.owned.values())
    return ListGroupsResponse(
        error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE,
        groups=[
            ListedGroup(
                group_id=g.group_id, protocol_type=protocol_type_of(g), group_state=g.state_name, group_type=g.type
            )
            for g in sorted(groups, key=lambda g: g.group_id)
        ],
    )


def error_response(request, code):
    return ListGroupsResponse(error_code=code)


API = Api(KEY, 0, 5, handle, error_response)
