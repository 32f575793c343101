"""Partitions and topics as the broker holds them: logs, high watermarks, topic ids, configs."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

from .config import TopicConfig
from .errors import BrokkrError, ErrorCode
from .log import AppendInfo, PartitionLog
from .protocol.records import patch_batch

if TYPE_CHECKING:
    from .validation import ValidatedRecords

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise BrokkrError("Topic name is illegal, it can't be empty", ErrorCode.INVALID_TOPIC_EXCEPTION)
    if name in (".", ".."):
        raise BrokkrError('Topic name cannot be "." or ".."', ErrorCode.INVALID_TOPIC_EXCEPTION)
    if len(name) > MAX_TOPIC_NAME:
        raise BrokkrError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )
    if not _LEGAL.match(name):
        raise BrokkrError(
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


class Partition:
    """One partition led by this broker. With one replica the high watermark is the log end."""

    def __init__(self, topic: Topic, index: int, log: PartitionLog):
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = 0
        self.high_watermark = log.log_end_offset
        self.bytes_appended = 0  # monotonic, lets delayed fetches count new bytes cheaply

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"

    @property
    def config(self) -> TopicConfig:
        return self.topic.config

    def append(self, validated: ValidatedRecords) -> AppendInfo:
        """Assign offsets by patching each batch header in place, then append."""
        first = offset = self.log.log_end_offset
        for h in validated.batches:
            patch_batch(validated.records, h.position, offset, self.leader_epoch)
            offset += h.last_offset_delta + 1
        info = self.log.append(validated.records, first, offset - 1, validated.max_timestamp, validated.record_count)
        self.bytes_appended += info.size
        return info

    def __repr__(self) -> str:
        return f"<Partition {self.name} hw={self.high_watermark}>"


class Topic:
    def __init__(self, name: str, topic_id: uuid.UUID, config: TopicConfig):
        self.name = name
        self.topic_id = topic_id
        self.config = config
        self.partitions: list[Partition] = []
