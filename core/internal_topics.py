"""Internal topics (Kafka's ``Topic.isInternal``): the topics coordinators keep their state
in, ``__consumer_offsets`` and ``__transaction_state`` (compacted) and ``__share_group_state``
(never compacted nor expired: snapshots and updates, as Kafka keeps it).

A plugin declares each of its own with ``brokkr_internal_topics`` (an :class:`InternalTopic`:
its name, its owner, the broker settings of its partition count and topic settings); the
broker collects them once, as ``broker.internal_topics`` (name -> declaration). For a
declared topic:

* only its owner creates it, with its own partition count and settings: on first use
  (FindCoordinator), or when Metadata would auto-create it (Kafka's
  AutoTopicCreationManager); a client's CreateTopics of it answers INVALID_REQUEST
  ("Creation of internal topic ... is prohibited.", Kafka's words for
  ``__cluster_metadata``);
* only its owner appends to it: Produce answers INVALID_TOPIC_EXCEPTION, as Kafka's
  ``ReplicaManager.appendToLocalLog`` does for clients (the owner appends through
  :func:`brokkr.core.append.append`, below the API);
* Metadata and DescribeTopicPartitions answer ``is_internal``;
* partition directories of it that the catalog does not list are adopted with its own
  settings, never a foreign topic's (segment storage).
"""

from __future__ import annotations

import attrs

from .errors import ConfigError


@attrs.frozen
class InternalTopic:
    """One internal topic, as its owner creates it."""

    name: str
    #: The name its owner is registered under on the broker's plugin manager; the owner's
    #: ``create_topic()`` starts creating the topic (in the background, at most once at a time).
    owner: str
    #: The broker settings it is created from: its partition count, its replication factor
    #: on a cluster, its ``segment.bytes`` and its ``min.insync.replicas`` on a cluster
    #: (None: the broker's default).
    num_partitions: str
    replication_factor: str
    segment_bytes: str
    min_isr: str | None = None
    #: "compact", or "delete" for a topic whose records are never compacted away nor
    #: expire (``__share_group_state``: retention.ms=-1, as Kafka creates it).
    cleanup_policy: str = "compact"

    def partitions(self, config) -> int:
        return config[self.num_partitions]

    def configs(self, config, replicated: bool) -> dict[str, str]:
        """Its topic settings (Kafka's strings): its cleanup policy, its own segment size and, on a
        cluster, its own ``min.insync.replicas`` (alone, one replica is all there is)."""
        configs = {"cleanup.policy": self.cleanup_policy, "segment.bytes": str(config[self.segment_bytes])}
        if self.cleanup_policy == "delete":
            configs["retention.ms"] = "-1"
        if replicated and self.min_isr is not None:
            configs["min.insync.replicas"] = str(config[self.min_isr])
        return configs

    def start_creation(self, broker) -> None:
        """Have its owner create it, as its first use does."""
        owner = broker.pm.get_plugin(self.owner)
        if owner is not None:
            owner.create_topic()


def collect_internal_topics(hook, broker) -> dict[str, InternalTopic]:
    """The internal topics ``brokkr_internal_topics`` declares, by name (called once per
    broker). A broker alone refuses a replication factor above 1 given for one of them
    (ConfigError): it would hold its single replica and never the others."""
    declared: dict[str, InternalTopic] = {}
    for result in hook.brokkr_internal_topics(broker=broker):
        for topic in result:
            if topic.name in declared and declared[topic.name] != topic:
                raise ValueError(f"internal topic {topic.name} is declared twice, differently")
            declared[topic.name] = topic
    config = broker.config
    if config["zookeeper.connect"] is None:
        for topic in declared.values():
            rf = config[topic.replication_factor]
            if rf > 1 and topic.replication_factor in config.explicit:
                raise ConfigError(f"{topic.replication_factor}={rf} needs a cluster (zookeeper.connect); alone it is 1")
    return declared
