"""Creating a topic through a request opens its partitions' logs a turn at a time
(``Broker.create_topic_in_turns``): other connections are served meanwhile, the topic's
name is taken from the start but the topic is known only once every log is open, and a
creation that fails or is cut short by the broker stopping leaves no partition behind.
Growing a topic (CreatePartitions, ``Broker.add_partitions``) does the same: the new
partitions appear together, growths and deletions of one topic wait for each other."""

from __future__ import annotations

import contextlib
import shutil

from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.storage.segment import files
from slow_storage import SlowStorage
from waiting import wait_for
from wire import (
    API_VERSIONS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    METADATA,
    PRODUCE,
    batch,
    metadata_body,
    produce_body,
)

CreateTopics = request_spec(CREATE_TOPICS)
CreatePartitions = request_spec(CREATE_PARTITIONS)
DeleteTopics = request_spec(DELETE_TOPICS)
PARTITIONS = 300


def create_body(name: str, partitions: int = PARTITIONS):
    topic = CreateTopics.struct("CreatableTopic")(name=name, num_partitions=partitions, replication_factor=1)
    return CreateTopics.cls(topics=[topic], timeout_ms=30000)


def grow_body(name: str, count: int, validate_only: bool = False):
    topic = CreatePartitions.struct("CreatePartitionsTopic")(name=name, count=count, assignments=None)
    return CreatePartitions.cls(topics=[topic], timeout_ms=30000, validate_only=validate_only)


def partition_count(client, name: str) -> int:
    [seen] = client.request(METADATA, 12, metadata_body(name, auto_create=False)).topics
    assert seen.error_code == ErrorCode.NONE
    return len(seen.partitions)


def partition_dirs(log_dir, topic: str) -> list[str]:
    """The topic's partition directories, those renamed aside for deletion included."""
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith(f"{topic}-"))


def test_other_connections_are_served_while_a_large_topic_is_created(brokkr_broker_factory):
    broker = brokkr_broker_factory()
    slow = SlowStorage(broker)
    with RawClient(broker.bootstrap_servers) as creator, RawClient(broker.bootstrap_servers) as other:
        creator.send(CREATE_TOPICS, 7, create_body("big.topic"))
        wait_for("the creation to start", lambda: slow.opened > 0)

        # Served between the creation's turns, while it is still going on.
        versions = request_spec(API_VERSIONS).cls(client_software_name="test", client_software_version="1")
        assert other.request(API_VERSIONS, 3, versions).error_code == ErrorCode.NONE
        [seen] = other.request(METADATA, 12, metadata_body("big.topic")).topics
        assert seen.error_code == ErrorCode.LEADER_NOT_AVAILABLE  # being created: not yet known
        [seen] = other.request(METADATA, 12, metadata_body("big.topic", auto_create=False)).topics
        assert seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        [again] = other.request(CREATE_TOPICS, 7, create_body("big.topic")).topics
        assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        [collides] = other.request(CREATE_TOPICS, 7, create_body("big_topic")).topics  # metric names collide
        assert collides.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert slow.opened < PARTITIONS, "the other connection waited for the whole creation"

        _, answer = creator.receive(CREATE_TOPICS, 7)
        [created] = answer.topics
        assert created.error_code == ErrorCode.NONE and created.num_partitions == PARTITIONS
        [seen] = other.request(METADATA, 12, metadata_body("big.topic", auto_create=False)).topics
        assert seen.error_code == ErrorCode.NONE and len(seen.partitions) == PARTITIONS
    assert slow.opened == PARTITIONS


def test_a_topic_whose_creation_fails_midway_leaves_no_partition_behind(brokkr_broker_factory, tmp_path):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    slow = SlowStorage(broker, fail_at=20)
    with RawClient(broker.bootstrap_servers) as c:
        [failed] = c.request(CREATE_TOPICS, 7, create_body("doomed")).topics
        assert failed.error_code != ErrorCode.NONE
        slow.restore()
        [seen] = c.request(METADATA, 12, metadata_body("doomed", auto_create=False)).topics
        assert seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        wait_for("the 20 opened partitions to be deleted", lambda: not partition_dirs(log_dir, "doomed"))

        [created] = c.request(CREATE_TOPICS, 7, create_body("doomed", 3)).topics  # the name is free again
        assert created.error_code == ErrorCode.NONE
    assert partition_dirs(log_dir, "doomed") == ["doomed-0", "doomed-1", "doomed-2"]


def test_a_broker_stopped_while_creating_a_topic_leaves_no_partition_behind(brokkr_broker_factory, tmp_path):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    slow = SlowStorage(broker)
    with RawClient(broker.bootstrap_servers) as c:
        c.send(CREATE_TOPICS, 7, create_body("cut"))
        wait_for("the creation to start", lambda: slow.opened >= 10)
        broker.stop()
    assert slow.opened < PARTITIONS

    restarted = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(restarted.bootstrap_servers) as c:
        [seen] = c.request(METADATA, 12, metadata_body("cut", auto_create=False)).topics
        assert seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "cut" not in restarted.broker.topics
    wait_for("the opened partitions to be deleted", lambda: not partition_dirs(log_dir, "cut"))


def produced(client, topic: str, partition: int) -> int:
    body = produce_body(topic, batch(3), partition=partition)
    [t] = client.request(PRODUCE, 9, body).responses
    return t.partition_responses[0].error_code


GROWN = 2 + PARTITIONS  # what start_growth grows its topic to


def start_growth(broker, client, name: str, started: int = 1) -> SlowStorage:
    """Create ``name`` with 2 partitions, then send (not wait for) its growth to ``GROWN``
    on slow storage; return that storage once ``started`` new logs are open."""
    [created] = client.request(CREATE_TOPICS, 7, create_body(name, 2)).topics
    assert created.error_code == ErrorCode.NONE
    slow = SlowStorage(broker)
    client.send(CREATE_PARTITIONS, 3, grow_body(name, GROWN))
    wait_for("the growth to start", lambda: slow.opened >= started)
    return slow


def test_other_connections_are_served_while_a_topic_grows(brokkr_broker_factory):
    broker = brokkr_broker_factory()
    with RawClient(broker.bootstrap_servers) as grower, RawClient(broker.bootstrap_servers) as other:
        slow = start_growth(broker, grower, "growing")

        # Served between the growth's turns; the new partitions join all at once, at the end.
        assert partition_count(other, "growing") == 2
        assert produced(other, "growing", 1) == ErrorCode.NONE
        assert produced(other, "growing", 2) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        [checked] = other.request(CREATE_PARTITIONS, 3, grow_body("growing", 1, validate_only=True)).results
        assert checked.error_code == ErrorCode.INVALID_PARTITIONS  # checked against the count it has now
        assert slow.opened < PARTITIONS, "the other connection waited for the whole growth"

        _, answer = grower.receive(CREATE_PARTITIONS, 3)
        assert [r.error_code for r in answer.results] == [ErrorCode.NONE]
        assert partition_count(other, "growing") == GROWN
        assert produced(other, "growing", GROWN - 1) == ErrorCode.NONE
    assert slow.opened == PARTITIONS


def test_a_second_growth_of_a_topic_waits_for_the_first_and_is_checked_against_its_outcome(brokkr_broker_factory):
    broker = brokkr_broker_factory()
    with RawClient(broker.bootstrap_servers) as first, RawClient(broker.bootstrap_servers) as second:
        slow = start_growth(broker, first, "twice")
        [again] = second.request(CREATE_PARTITIONS, 3, grow_body("twice", GROWN)).results
        assert slow.opened == PARTITIONS  # answered only once the first growth was done
        assert again.error_code == ErrorCode.INVALID_PARTITIONS
        assert again.error_message == f"Topic already has {GROWN} partitions."
        _, answer = first.receive(CREATE_PARTITIONS, 3)
        assert [r.error_code for r in answer.results] == [ErrorCode.NONE]
        assert partition_count(second, "twice") == GROWN


def test_a_topic_deleted_while_it_grows_is_deleted_whole_after_the_growth(brokkr_broker_factory, tmp_path):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(broker.bootstrap_servers) as grower, RawClient(broker.bootstrap_servers) as deleter:
        slow = start_growth(broker, grower, "short.lived")
        body = DeleteTopics.cls(topic_names=["short.lived"], timeout_ms=30000)
        [deleted] = deleter.request(DELETE_TOPICS, 4, body).responses
        assert slow.opened == PARTITIONS  # the deletion waited for the growth
        assert deleted.error_code == ErrorCode.NONE
        _, answer = grower.receive(CREATE_PARTITIONS, 3)
        assert [r.error_code for r in answer.results] == [ErrorCode.NONE]
        [seen] = deleter.request(METADATA, 12, metadata_body("short.lived", auto_create=False)).topics
        assert seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    wait_for("every partition, old and new, to be deleted", lambda: not partition_dirs(log_dir, "short.lived"))


def test_a_growth_that_fails_midway_leaves_the_topic_as_it_was(brokkr_broker_factory, tmp_path):
    old = ["stunted-0", "stunted-1"]
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(broker.bootstrap_servers) as c:
        [created] = c.request(CREATE_TOPICS, 7, create_body("stunted", 2)).topics
        assert created.error_code == ErrorCode.NONE
        slow = SlowStorage(broker, fail_at=20)
        [failed] = c.request(CREATE_PARTITIONS, 3, grow_body("stunted", GROWN)).results
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert failed.error_message == "Error creating partitions of topic stunted: [Errno 28] No space left on device"
        slow.restore()
        assert partition_count(c, "stunted") == 2
        [listed] = [t for t in files.read_catalog(log_dir / files.CATALOG) if t.name == "stunted"]
        assert listed.partitions == 2, "the catalog lists the old count again"
        wait_for("the 20 new partitions to be deleted", lambda: partition_dirs(log_dir, "stunted") == old)

        [grown] = c.request(CREATE_PARTITIONS, 3, grow_body("stunted", 3)).results  # it may grow again
        assert grown.error_code == ErrorCode.NONE
        assert partition_count(c, "stunted") == 3
    assert partition_dirs(log_dir, "stunted") == [*old, "stunted-2"]


def test_a_broker_stopped_while_a_topic_grows_keeps_the_topic_as_it_was(brokkr_broker_factory, tmp_path):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(broker.bootstrap_servers) as c:
        slow = start_growth(broker, c, "halted", started=10)
        broker.stop()
    assert slow.opened < PARTITIONS

    restarted = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(restarted.bootstrap_servers) as c:
        assert partition_count(c, "halted") == 2
    wait_for(
        "the opened partitions to be deleted", lambda: partition_dirs(log_dir, "halted") == ["halted-0", "halted-1"]
    )


def killed_image(log_dir, image) -> None:
    """Copy ``log_dir`` to ``image`` as a broker killed now would leave it (a file its
    flusher renames meanwhile is left out, as the kill might have left it)."""

    def copy_present(src, dst):
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(src, dst)

    shutil.copytree(log_dir, image, copy_function=copy_present)


def test_a_broker_killed_while_a_topic_grows_restarts_with_the_topic_grown(brokkr_broker_factory, tmp_path):
    """As Kafka's controller records new partitions in the metadata before brokers create
    them, the catalog lists the new count before the first new log is opened: a broker
    killed mid-growth (its log dir copied as the 6th new log opens) restarts with the topic
    grown, every partition usable, the 5 opened logs kept and the missing ones created
    (not with the old count and 5 directories nothing opens)."""
    log_dir, image = tmp_path / "data", tmp_path / "killed"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(broker.bootstrap_servers) as c:
        [created] = c.request(CREATE_TOPICS, 7, create_body("sprouting", 2)).topics
        assert created.error_code == ErrorCode.NONE
        assert produced(c, "sprouting", 0) == ErrorCode.NONE
        SlowStorage(broker, before=lambda opened: opened == 5 and killed_image(log_dir, image))
        [grown] = c.request(CREATE_PARTITIONS, 3, grow_body("sprouting", 12)).results
        assert grown.error_code == ErrorCode.NONE
    assert partition_dirs(image, "sprouting") == sorted(f"sprouting-{i}" for i in range(7))

    restarted = brokkr_broker_factory({"log.dirs": str(image)})
    with RawClient(restarted.bootstrap_servers) as c:
        assert partition_count(c, "sprouting") == 12
        assert [produced(c, "sprouting", i) for i in range(12)] == [ErrorCode.NONE] * 12
    kept = restarted.call(lambda: restarted.broker.partition("sprouting", 0).log.log_end_offset)
    assert kept == 6, "the records from before the kill are kept"
    assert partition_dirs(image, "sprouting") == sorted(f"sprouting-{i}" for i in range(12))
