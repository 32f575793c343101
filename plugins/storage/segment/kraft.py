"""Topics as a Kafka broker in KRaft mode recorded them, for adopting its log directory.

A KRaft broker keeps no topic catalog beside its partitions: topic ids, partition counts
and topic settings live in the metadata log, partition ``__cluster_metadata-0``. Its
latest snapshot (``<end offset>-<epoch>.checkpoint``, a file of record batches) holds the
whole state as of its end offset; the ``.log`` segments hold the records after it. Each
record's value is a metadata record framed as Kafka's ``MetadataRecordSerde`` writes it:
unsigned varints for the frame version (1), the record type (its ``apiKey``) and the
record version, then the record in its flexible encoding (the definitions in
``brokkr.core.protocol.metadata_records``). Snapshot header and footer are control batches.

Only what adoption needs is read: TopicRecord, PartitionRecord, PartitionChangeRecord
(for the leader epoch, bumped on a leader change as Kafka's ``PartitionRegistration.merge``
does), ConfigRecord (topic resources) and RemoveTopicRecord. Broker-level settings, ACLs, quotas and SCRAM users in
the log are not carried over (brokkr keeps those itself).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
from brokkr.core.compression import Codec, DecompressionError
from brokkr.core.errors import CorruptRequest
from brokkr.core.log import batch_records
from brokkr.core.partition import CLUSTER_METADATA_TOPIC
from brokkr.core.protocol.primitives import Reader
from brokkr.core.protocol.records import iter_batches_untrusted
from brokkr.core.protocol.schema import load_message

log = logging.getLogger("brokkr.storage")

METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
FRAME_VERSION = 1
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
_RECORDS = {
    2: "TopicRecord",
    3: "PartitionRecord",
    4: "ConfigRecord",
    5: "PartitionChangeRecord",
    9: "RemoveTopicRecord",
}
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader when the leader stays


@attrs.define
class KraftTopic:
    name: str
    topic_id: uuid.UUID
    #: partition -> the leader epoch the metadata log gives it
    leader_epochs: dict[int, int] = attrs.field(factory=dict)
    configs: dict[str, str] = attrs.field(factory=dict)


class MetadataLogError(ValueError):
    """The metadata log does not read as Kafka writes it."""


def read_kraft_topics(log_dir: Path, codecs: dict[int, Codec]) -> dict[str, KraftTopic] | None:
    """The topics the KRaft metadata log in ``log_dir`` describes, by name, or None when
    ``log_dir`` holds no metadata log. Raises MetadataLogError for one that cannot be read."""
    meta = log_dir / METADATA_DIR
    if not meta.is_dir():
        return None
    snapshots = sorted(meta.glob("*.checkpoint"), key=lambda p: _snapshot_end(p))
    segments = sorted(meta.glob("*.log"))
    if not snapshots and not segments:
        return None
    state = _State()
    start = 0
    if snapshots:
        start = _snapshot_end(snapshots[-1])
        for record_type, version, body in _records(snapshots[-1], codecs, 0):
            state.apply(record_type, version, body)
    for segment in segments:
        for record_type, version, body in _records(segment, codecs, start):
            state.apply(record_type, version, body)
    return {t.name: t for t in state.topics.values()}


def _snapshot_end(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[0])
    except ValueError:
        raise MetadataLogError(f"{path}: not a snapshot name (<end offset>-<epoch>.checkpoint)") from None


def _records(path: Path, codecs: dict[int, Codec], start: int) -> Iterator[tuple[int, int, Reader]]:
    """(record type, version, reader at the record) for each metadata record at or after
    offset ``start`` in a file of batches; control batches (snapshot header and footer,
    leader changes) are skipped."""
    data = path.read_bytes()
    try:
        for header in iter_batches_untrusted(data):
            if header.is_control or header.base_offset + header.last_offset_delta < start:
                continue
            for record in batch_records(data, header, codecs):
                if record.offset < start or record.value is None:
                    continue
                r = Reader(record.value)
                frame, record_type, version = r.uvarint(), r.uvarint(), r.uvarint()
                if frame != FRAME_VERSION:
                    raise MetadataLogError(f"{path}: unknown metadata frame version {frame}")
                yield record_type, version, r
    except (CorruptRequest, DecompressionError, KeyError) as exc:
        raise MetadataLogError(f"{path}: {exc}") from None


@attrs.define
class _State:
    topics: dict[uuid.UUID, KraftTopic] = attrs.field(factory=dict)

    def apply(self, record_type: int, version: int, body: Reader) -> None:
        name = _RECORDS.get(record_type)
        if name is None:
            return
        try:
            record = load_message(name, "metadata_records").decode(version, body)
        except CorruptRequest as exc:
            raise MetadataLogError(f"{name} v{version}: {exc}") from None
        if name == "TopicRecord":
            self.topics[record.topic_id] = KraftTopic(record.name, record.topic_id)
        elif name == "PartitionRecord" and record.topic_id in self.topics:
            self.topics[record.topic_id].leader_epochs[record.partition_id] = record.leader_epoch
        elif name == "PartitionChangeRecord" and record.topic_id in self.topics:
            epochs = self.topics[record.topic_id].leader_epochs
            if record.leader != NO_LEADER_CHANGE and record.partition_id in epochs:
                epochs[record.partition_id] += 1
        elif name == "RemoveTopicRecord":
            self.topics.pop(record.topic_id, None)
        elif name == "ConfigRecord" and record.resource_type == TOPIC_RESOURCE:
            topic = next((t for t in self.topics.values() if t.name == record.resource_name), None)
            if topic is None:
                return
            if record.value is None:
                topic.configs.pop(record.name, None)
            else:
                topic.configs[record.name] = record.value
