"""ConsumerGroupDescribe (key 69), versions 0-1: a consumer group (KIP-848) as its coordinator
holds it: state, group and assignment epochs, the assignor, and each member with its
subscription, current and target assignment. An unknown group, or one of the classic
protocol, answers GROUP_ID_NOT_FOUND. Needs DESCRIBE on each group; a group whose members
name a topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its
members, as Kafka does, so that describing a group reveals no hidden topic. v1 (KIP-1099)
tells each member's type: 1, a consumer member; 0, a classic member (one whose record
carries ClassicMemberMetadata, as a Kafka log may hold; brokkr writes none)."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.apis.common import authorized_operations
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..consumer_group import ConsumerGroup
from ..consumer_member import assignment_items
from . import group_allowed

KEY = 69
_R = response_spec(KEY)
ConsumerGroupDescribeResponse = _R.cls
DescribedGroup = _R.struct("DescribedGroup")
Member = _R.struct("Member")
Assignment = _R.struct("Assignment")
TopicPartitions = _R.struct("TopicPartitions")
#: The operations Kafka reports in a group's AuthorizedOperations.
GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE)
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # MemberType (v1)
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def described_assignment(broker, assignment, spec=_R) -> Assignment:
    """Topics by id and name; a topic deleted meanwhile is left out, as Kafka leaves it
    (``spec``: the response's, whose Assignment and TopicPartitions structs are built; also
    ShareGroupDescribe's)."""
    out = []
    for topic_id, partitions in assignment_items(assignment):
        topic = broker.topics_by_id.get(topic_id)
        if topic is not None:
            out.append(spec.struct("TopicPartitions")(topic_id=topic_id, topic_name=topic.name, partitions=partitions))
    return spec.struct("Assignment")(topic_partitions=out)


def _describe(broker, coordinator, group_id: str) -> DescribedGroup:
    if not group_id:
        return _failed(group_id, ErrorCode.INVALID_GROUP_ID)
    error = coordinator.check_coordinator(group_id)
    if error:
        return _failed(group_id, error)
    group = coordinator.groups.get(group_id)
    if not isinstance(group, ConsumerGroup):
        message = f"Group {group_id} not found." if group is None else f"Group {group_id} is not a consumer group."
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message)
    settings = coordinator.consumer.protocol.settings
    members = [
        Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=described_assignment(broker, m.assigned),
            target_assignment=described_assignment(broker, group.target_assignment.get(m.member_id, {})),
            member_type=CLASSIC_MEMBER if m.classic_metadata is not None else CONSUMER_MEMBER,
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    return DescribedGroup(
        error_code=0,
        group_id=group_id,
        group_state=group.state_name,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(list(settings.assignors)) or settings.assignors[0],
        members=members,
    )


def _topics(described: DescribedGroup) -> set[str]:
    names = set()
    for m in described.members:
        names.update(m.subscribed_topic_names)
        for a in (m.assignment, m.target_assignment):
            names.update(tp.topic_name for tp in a.topic_partitions)
    return names


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> DescribedGroup:
    return DescribedGroup(
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
    )


async def handle(broker, ctx, request):
    coordinator = coordinator_of(broker)
    allowed = group_allowed(broker, ctx, AclOperation.DESCRIBE, request.group_ids)
    described = []
    for group_id, ok in zip(request.group_ids, allowed, strict=True):
        d = _describe(broker, coordinator, group_id) if ok else _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        described.append(d)
    hide_and_authorize(broker, ctx, request, described, _topics, _failed)
    return ConsumerGroupDescribeResponse(groups=described)


def hide_and_authorize(broker, ctx, request, described: list, topics_of, failed) -> None:
    """Kafka's last steps of a modern group's describe (also ShareGroupDescribe's): a group
    naming a topic (``topics_of``) the principal may not DESCRIBE becomes ``failed``'s
    TOPIC_AUTHORIZATION_FAILED; the authorized operations when the request asks for them."""
    topics = sorted(set().union(*(topics_of(d) for d in described if not d.error_code)))
    visible = broker.authorize_topics(ctx, AclOperation.DESCRIBE, topics)
    for i, d in enumerate(described):
        if not d.error_code and not all(visible[t] for t in topics_of(d)):
            described[i] = failed(d.group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, HIDDEN_TOPICS)
    if request.include_authorized_operations:
        ids = [d.group_id for d in described if not d.error_code]
        ops = authorized_operations(broker, ctx, ResourceType.GROUP, GROUP_OPERATIONS, ids)
        for d in described:
            if d.group_id in ops:
                d.authorized_operations = ops[d.group_id]


def error_response(request, code):
    return ConsumerGroupDescribeResponse(groups=[_failed(g, code) for g in request.group_ids])


API = Api(KEY, 0, 1, handle, error_response)
