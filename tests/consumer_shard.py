"""A consumer-group coordinator shard for unit tests: the operations of
:class:`~brokkr.plugins.groups.consumer_protocol.ConsumerProtocol`, their records encoded,
decoded and replayed exactly as the coordinator does, a fake clock and fake topics; and
:class:`Client`, a consumer that revokes and takes partitions as the answers say."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
from brokkr.core.protocol.frames import request_spec
from brokkr.plugins.groups import consumer_records
from brokkr.plugins.groups.classic import ClassicGroup
from brokkr.plugins.groups.consumer_group import ConsumerGroup, GroupApiError
from brokkr.plugins.groups.consumer_protocol import ConsumerProtocol, HeartbeatResult, Settings
from brokkr.plugins.groups.records import decode_record

HEARTBEAT = 68
Request = request_spec(HEARTBEAT).cls
OwnedTopic = request_spec(HEARTBEAT).struct("TopicPartitions")


class FakeTopics:
    """Topics by name: (id, partition count); ``version`` moves on create and delete."""

    def __init__(self, **counts: int):
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.version = 0
        for name, n in counts.items():
            self.create(name, n)

    def create(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid5(uuid.NAMESPACE_OID, f"{name}-{self.version}")
        self.topics[name] = (topic_id, partitions)
        self.version += 1
        return topic_id

    def grow(self, name: str, partitions: int) -> None:
        self.topics[name] = (self.topics[name][0], partitions)

    def delete(self, name: str) -> None:
        del self.topics[name]
        self.version += 1

    def id(self, name: str) -> uuid.UUID:
        return self.topics[name][0]

    def lookup(self, name: str):
        return self.topics.get(name)

    def names(self):
        return list(self.topics)


class Shard:
    def __init__(self, topics: FakeTopics | None = None, **settings: Any):
        self.groups: dict[str, Any] = {}
        self.protocol = ConsumerProtocol(Settings(**settings))
        self.topics = topics or FakeTopics(t=6)
        self.now = 1_000_000
        #: Every record written, in order (what the partition would hold).
        self.log: list[tuple[bytes, bytes | None]] = []

    def apply(self, records) -> None:
        """Write (here: keep) and replay, through the record codecs."""
        for key, value in records:
            self.log.append((key, value))
            replay(self.groups, key, value)

    def heartbeat(self, api_version: int = 1, **fields: Any) -> HeartbeatResult:
        records, result = self.protocol.heartbeat(
            self.groups,
            request(**fields),
            now_ms=self.now,
            topics=self.topics,
            api_version=api_version,
            client_id="client",
            client_host="/127.0.0.1",
        )
        self.apply(records)
        return result

    def error(self, api_version: int = 1, **fields: Any) -> GroupApiError:
        try:
            self.heartbeat(api_version, **fields)
        except GroupApiError as exc:
            return exc
        raise AssertionError("the heartbeat was accepted")

    def advance(self, ms: int) -> list:
        """Move the clock and fire the timers that are due; the expiries fired."""
        self.now += ms
        fired = self.protocol.timers.due(self.now)
        for expiry in fired:
            self.apply(self.protocol.expire(self.groups, expiry, self.topics, self.now))
        return fired

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.groups[group_id]

    def reloaded(self) -> dict[str, Any]:
        """The groups a fresh coordinator rebuilds from the log."""
        groups: dict[str, Any] = {}
        for key, value in self.log:
            replay(groups, key, value)
        return groups


def replay(groups: dict[str, Any], key: bytes, value: bytes | None) -> None:
    record = decode_record(key, value)
    if record.type in consumer_records.TYPES:
        consumer_records.replay(groups, record)
    elif record.type == "GroupMetadata" and value is None and isinstance(groups.get(record.key.group), ClassicGroup):
        del groups[record.key.group]
    else:
        raise AssertionError(f"unexpected {record.type} record")


def request(**fields: Any):
    body = dict(group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=-1)
    body.update(fields)
    if "topic_partitions" in body and isinstance(body["topic_partitions"], dict):
        body["topic_partitions"] = [
            OwnedTopic(topic_id=t, partitions=sorted(ps)) for t, ps in body["topic_partitions"].items()
        ]
    return Request(**body)


@attrs.define
class Client:
    """A consumer of one group: joins, heartbeats with what it owns, gives up what its
    answer no longer lists and takes what it newly lists (as the Java consumer does)."""

    shard: Shard
    topics: list[str] = attrs.field(factory=lambda: ["t"])
    member_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    group_id: str = "g"
    regex: str | None = None
    instance_id: str | None = None
    assignor: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = attrs.field(factory=dict)

    def beat(self) -> HeartbeatResult:
        fields: dict[str, Any] = dict(group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch)
        fields["instance_id"] = self.instance_id
        if self.epoch == 0:
            fields.update(
                rebalance_timeout_ms=30000,
                subscribed_topic_names=self.topics if self.regex is None else None,
                subscribed_topic_regex=self.regex,
                server_assignor=self.assignor,
                topic_partitions={},
            )
        else:
            fields["topic_partitions"] = self.owned
        result = self.shard.heartbeat(**fields)
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = dict(result.assignment)
        return result

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        result = self.shard.heartbeat(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id
        )
        self.owned, self.epoch = {}, 0
        return result

    def partitions(self, topic: str = "t") -> set[int]:
        return set(self.owned.get(self.shard.topics.id(topic), ()))
