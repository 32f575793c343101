"""Segment storage (``brokkr.storage=segment``, the default): each partition kept exactly as
Apache Kafka keeps it on disk, so Kafka's tools and habits carry over.

Modules, from the bottom up: :mod:`.files` (the small files: checkpoints, metadata, the
catalog), :mod:`.index` (``.index`` and ``.timeindex``), :mod:`.segment` (one ``.log``
with its indexes), :mod:`.partition_log` (a partition's segments: roll, read, recovery,
retention) and :mod:`.storage` (the log directories).
"""

from __future__ import annotations

from brokkr.core.plugins import hookimpl

from .storage import SegmentStorage


@hookimpl(trylast=True)
def brokkr_open_storage(broker) -> SegmentStorage | None:
    if broker.config["brokkr.storage"] != "segment":
        return None
    storage = SegmentStorage(broker.config, broker.codecs, broker.node_id, broker.cluster_id, broker.internal_topics)
    broker.cluster_id = storage.cluster_id
    return storage
