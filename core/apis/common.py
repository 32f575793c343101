"""Small pieces several API handlers share."""

from __future__ import annotations

import uuid

from ..errors import ErrorCode
from ..partition import Partition, Topic


def resolve_topic(broker, name: str | None, topic_id: uuid.UUID | None, by_id: bool) -> tuple[Topic | None, ErrorCode]:
    """A topic named by name (older versions) or by id (newer ones), with Kafka's error."""
    if by_id:
        topic = broker.topics_by_id.get(topic_id)
        return topic, ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_ID
    topic = broker.topics.get(name)
    return topic, ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def partition_of(topic: Topic | None, index: int) -> Partition | None:
    if topic is None or not 0 <= index < len(topic.partitions):
        return None
    return topic.partitions[index]


def leader_epoch_error(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """Kafka's check of a client's view of the leader epoch (-1: not checked)."""
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH
