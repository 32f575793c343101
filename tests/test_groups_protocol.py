"""The classic group protocol and offsets on raw sockets: Kafka's error codes for each
misstep (unknown member, illegal generation, rebalance in progress, fenced instance,
oversized metadata, unauthorized group), offsets written to ``__consumer_offsets`` and
read back after a restart, offset expiry, group deletion, and the groups Kafka itself
wrote loading from its own partitions."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from authorizers import Deny
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.client import RawClient
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import read_all_records
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.groups.coordinator import OFFSETS_TOPIC
from brokkr.plugins.groups.records import decode_record

(OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST) = (
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    15,
    16,
)
DELETE_GROUPS, OFFSET_DELETE = 42, 47
KAFKA_LOGS = Path(__file__).parent / "fixtures" / "kafka-logs"
FAST = {"group.initial.rebalance.delay.ms": 0}


def req(api_key: int, **fields):
    return request_spec(api_key).cls(**fields)


def protocols(metadata: bytes = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"):
    """One "range" protocol whose metadata subscribes to topic "t" (ConsumerProtocolSubscription v0)."""
    return [request_spec(JOIN).struct("JoinGroupRequestProtocol")(name="range", metadata=metadata)]


def join(c: RawClient, group: str, member_id: str = "", version: int = 5, **fields):
    body = dict(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=protocols(),
    )
    body.update(fields)
    return c.request(JOIN, version, req(JOIN, **body))


def sync(c: RawClient, group: str, member_id: str, generation: int, assignments=(), version: int = 3):
    entry = request_spec(SYNC).struct("SyncGroupRequestAssignment")
    body = req(
        SYNC,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        assignments=[entry(member_id=m, assignment=a) for m, a in assignments],
    )
    return c.request(SYNC, version, body)


def heartbeat(c: RawClient, group: str, member_id: str, generation: int, **fields):
    return c.request(
        HEARTBEAT, 3, req(HEARTBEAT, group_id=group, generation_id=generation, member_id=member_id, **fields)
    )


def commit(c: RawClient, group: str, topic: str, offsets: dict[int, int], generation=-1, member_id="", **fields):
    topic_cls = request_spec(OFFSET_COMMIT).struct("OffsetCommitRequestTopic")
    part_cls = request_spec(OFFSET_COMMIT).struct("OffsetCommitRequestPartition")
    body = req(
        OFFSET_COMMIT,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[
            topic_cls(
                name=topic,
                partitions=[
                    part_cls(partition_index=p, committed_offset=o, committed_metadata=fields.pop("metadata", "m"))
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    response = c.request(OFFSET_COMMIT, 8, body)
    return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def fetch(c: RawClient, group: str, version: int = 8) -> dict[tuple[str, int], int]:
    if version >= 8:
        g = request_spec(OFFSET_FETCH).struct("OffsetFetchRequestGroup")(group_id=group, topics=None)
        response = c.request(OFFSET_FETCH, version, req(OFFSET_FETCH, groups=[g]))
        (answer,) = response.groups
        assert answer.error_code == 0
        topics = answer.topics
    else:
        response = c.request(OFFSET_FETCH, version, req(OFFSET_FETCH, group_id=group, topics=None))
        assert response.error_code == 0
        topics = response.topics
    return {(t.name, p.partition_index): p.committed_offset for t in topics for p in t.partitions}


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    b.call(b.broker.create_topic, "t", 2)
    with RawClient(b.bootstrap_servers) as c:  # creates __consumer_offsets
        c.request(FIND_COORDINATOR, 3, req(FIND_COORDINATOR, key="g", key_type=0))
    b.call(coordinator_of(b.broker).wait_loaded)
    return b


def stable_member(c: RawClient, group: str) -> tuple[str, int]:
    """Join ``group`` as its only member and sync: (member id, generation)."""
    required = join(c, group)
    assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED and required.member_id
    joined = join(c, group, required.member_id)
    assert joined.error_code == 0 and joined.leader == joined.member_id and joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [joined.member_id]
    synced = sync(c, group, joined.member_id, joined.generation_id, [(joined.member_id, b"assignment")])
    assert (synced.error_code, synced.assignment) == (0, b"assignment")
    return joined.member_id, joined.generation_id


def test_a_member_joins_syncs_heartbeats_and_leaves(broker):
    with RawClient(broker.bootstrap_servers) as c:
        member, generation = stable_member(c, "g")
        assert heartbeat(c, "g", member, generation).error_code == 0
        assert heartbeat(c, "g", "nobody", generation).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert heartbeat(c, "g", member, generation + 1).error_code == ErrorCode.ILLEGAL_GENERATION
        assert sync(c, "g", member, generation + 1).error_code == ErrorCode.ILLEGAL_GENERATION
        assert join(c, "g", "nobody").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        identity = request_spec(LEAVE).struct("MemberIdentity")
        left = c.request(
            LEAVE, 3, req(LEAVE, group_id="g", members=[identity(member_id=member), identity(member_id="nobody")])
        )
        assert [m.error_code for m in left.members] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
        described = c.request(DESCRIBE, 5, req(DESCRIBE, groups=["g", "unknown"]))
    assert [(g.group_state, len(g.members)) for g in described.groups] == [("Empty", 0), ("Dead", 0)]


def test_a_heartbeat_during_a_rebalance_answers_rebalance_in_progress(broker):
    with RawClient(broker.bootstrap_servers) as a, RawClient(broker.bootstrap_servers) as b:
        member, generation = stable_member(a, "g")
        b.send(JOIN, 3, req(JOIN, group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                            protocol_type="consumer", protocols=protocols()))  # fmt: skip
        deadline = time.monotonic() + 5
        while (answer := heartbeat(a, "g", member, generation).error_code) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert answer == ErrorCode.REBALANCE_IN_PROGRESS
        # Committing with the old generation is still allowed while the group prepares.
        assert commit(a, "g", "t", {0: 5}, generation, member) == {0: 0}
        rejoined = join(a, "g", member, version=3)
        _, other = b.receive(JOIN, 3)
        assert rejoined.generation_id == other.generation_id == generation + 1
        assert {rejoined.leader} == {other.leader} == {member}
        assert len(rejoined.members) == 2 and other.members == []
        assert commit(a, "g", "t", {0: 6}, rejoined.generation_id, member) == {0: ErrorCode.REBALANCE_IN_PROGRESS}


def test_bad_joins_get_kafkas_errors(broker):
    with RawClient(broker.bootstrap_servers) as c:
        assert join(c, "g", session_timeout_ms=10).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(c, "").error_code == ErrorCode.INVALID_GROUP_ID
        assert join(c, "g", protocol_type="").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        member, _ = stable_member(c, "g")
        other = join(c, "g", protocol_type="connect")
        assert other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_group_refuses_members_beyond_group_max_size(brokkr_broker_factory):
    b = brokkr_broker_factory({**FAST, "group.max.size": 1})
    b.call(b.broker.create_topic, "t", 1)
    with RawClient(b.bootstrap_servers) as c:
        c.request(FIND_COORDINATOR, 3, req(FIND_COORDINATOR, key="g", key_type=0))
        b.call(coordinator_of(b.broker).wait_loaded)
        stable_member(c, "g")
        assert join(c, "g").error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_static_member_replaced_by_a_new_instance_is_fenced(broker):
    with RawClient(broker.bootstrap_servers) as c:
        first = join(c, "g", group_instance_id="i1")
        assert first.error_code == 0, "static members need no second join"
        synced = sync(c, "g", first.member_id, first.generation_id, [(first.member_id, b"a")])
        assert synced.error_code == 0
        second = join(c, "g", group_instance_id="i1")
        assert second.error_code == 0 and second.member_id != first.member_id
        assert second.generation_id == first.generation_id, "no rebalance for a known static member"
        old = heartbeat(c, "g", first.member_id, first.generation_id, group_instance_id="i1")
        assert old.error_code == ErrorCode.FENCED_INSTANCE_ID
        assert heartbeat(c, "g", second.member_id, second.generation_id, group_instance_id="i1").error_code == 0
        assert sync(c, "g", second.member_id, second.generation_id).assignment == b"a", "it keeps the assignment"


def test_an_assignment_too_large_to_store_fails_the_sync_and_the_broker_serves_on(broker):
    with RawClient(broker.bootstrap_servers) as c:
        required = join(c, "g")
        joined = join(c, "g", required.member_id)
        huge = b"x" * (2 << 20)  # beyond __consumer_offsets' max.message.bytes
        synced = sync(c, "g", joined.member_id, joined.generation_id, [(joined.member_id, huge)])
        assert synced.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert heartbeat(c, "g", joined.member_id, joined.generation_id).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        assert commit(c, "simple", "t", {0: 1}, metadata="x" * 5000) == {0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert commit(c, "simple", "t", {0: 1}) == {0: 0}


def test_commits_are_checked_against_the_group(broker):
    with RawClient(broker.bootstrap_servers) as c:
        assert commit(c, "new", "t", {0: 1}, generation=3, member_id="m") == {0: ErrorCode.ILLEGAL_GENERATION}
        assert commit(c, "new", "t", {0: 1, 7: 1}) == {0: 0, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert commit(c, "new", "nope", {0: 1}) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        member, generation = stable_member(c, "g")
        assert commit(c, "g", "t", {0: 1}) == {0: ErrorCode.UNKNOWN_MEMBER_ID}, "not a simple commit: it has members"
        assert commit(c, "g", "t", {0: 1}, generation + 1, member) == {0: ErrorCode.ILLEGAL_GENERATION}
        assert commit(c, "g", "t", {0: 9, 1: 4}, generation, member) == {0: 0, 1: 0}
        assert fetch(c, "g") == {("t", 0): 9, ("t", 1): 4}
        assert fetch(c, "g", version=5) == {("t", 0): 9, ("t", 1): 4}
        assert fetch(c, "unknown") == {}


def test_offsets_survive_a_restart_in_kafkas_record_format(brokkr_broker_factory, tmp_path):
    config = {**FAST, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "t", 2)
    with RawClient(b.bootstrap_servers) as c:
        c.request(FIND_COORDINATOR, 3, req(FIND_COORDINATOR, key="g", key_type=0))
        b.call(coordinator_of(b.broker).wait_loaded)
        member, generation = stable_member(c, "g")
        assert commit(c, "g", "t", {0: 11, 1: 12}, generation, member) == {0: 0, 1: 0}
        assert commit(c, "simple", "t", {1: 3}) == {1: 0}
    index = coordinator_of(b.broker).partition_for("g")
    b.stop()
    log = tmp_path / "data" / f"{OFFSETS_TOPIC}-{index}" / "00000000000000000000.log"
    records = [decode_record(r.key, r.value) for r in read_all_records(log.read_bytes())]
    assert {r.type for r in records} == {"OffsetCommit", "GroupMetadata"}
    assert records[-1].type == "OffsetCommit" and records[-1].value_version == 3
    again = brokkr_broker_factory(config)
    again.call(coordinator_of(again.broker).wait_loaded)
    with RawClient(again.bootstrap_servers) as c:
        assert fetch(c, "g") == {("t", 0): 11, ("t", 1): 12}
        assert fetch(c, "simple") == {("t", 1): 3}
        described = c.request(DESCRIBE, 5, req(DESCRIBE, groups=["g"]))
        (g,) = described.groups
        assert (g.group_state, [m.member_id for m in g.members]) == ("Stable", [member])
        assert g.members[0].member_assignment == b"assignment"
        assert heartbeat(c, "g", member, generation).error_code == 0, "the member carries on after the restart"


def test_offsets_of_an_empty_group_expire_and_the_group_goes(broker):
    coordinator = coordinator_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        member, generation = stable_member(c, "g")
        assert commit(c, "g", "t", {0: 5}, generation, member) == {0: 0}
        assert commit(c, "simple", "t", {0: 7}) == {0: 0}
        week = 7 * 24 * 3600 * 1000
        later = int(time.time() * 1000) + week + 60_000
        assert broker.call(coordinator.offsets.expire, later) == 1, "the simple group's offset, not the Stable one's"
        assert fetch(c, "simple") == {}
        identity = request_spec(LEAVE).struct("MemberIdentity")
        c.request(LEAVE, 3, req(LEAVE, group_id="g", members=[identity(member_id=member)]))
        emptied = int(time.time() * 1000)
        assert broker.call(coordinator.offsets.expire, emptied + week - 60_000) == 0, "retention counts from Empty"
        assert broker.call(coordinator.offsets.expire, emptied + week + 60_000) == 1
        listed = c.request(LIST, 4, req(LIST))
    assert [g.group_id for g in listed.groups] == [], "empty groups without offsets are removed"


def test_delete_groups_and_offsets(broker):
    with RawClient(broker.bootstrap_servers) as c:
        member, generation = stable_member(c, "active")
        assert commit(c, "active", "t", {0: 1, 1: 1}, generation, member) == {0: 0, 1: 0}
        assert commit(c, "idle", "t", {0: 2}) == {0: 0}
        deleted = c.request(DELETE_GROUPS, 2, req(DELETE_GROUPS, groups_names=["active", "idle", "none"]))
        assert [r.error_code for r in deleted.results] == [
            ErrorCode.NON_EMPTY_GROUP,
            0,
            ErrorCode.GROUP_ID_NOT_FOUND,
        ]
        assert fetch(c, "idle") == {}
        topic = request_spec(OFFSET_DELETE).struct("OffsetDeleteRequestTopic")
        part = request_spec(OFFSET_DELETE).struct("OffsetDeleteRequestPartition")
        body = req(OFFSET_DELETE, group_id="active", topics=[topic(name="t", partitions=[part(partition_index=0)])])
        answer = c.request(OFFSET_DELETE, 0, body)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        missing = c.request(OFFSET_DELETE, 0, req(OFFSET_DELETE, group_id="none", topics=[]))
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def deny_group_secret(a) -> bool:
    """Denies everything on group "secret"."""
    return a.resource_type == ResourceType.GROUP and a.resource_name == "secret"


def test_an_unauthorized_group_is_refused_and_not_listed(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST, plugins=(Deny(deny_group_secret),))
    b.call(b.broker.create_topic, "t", 1)
    with RawClient(b.bootstrap_servers) as c:
        c.request(FIND_COORDINATOR, 3, req(FIND_COORDINATOR, key="open", key_type=0))
        b.call(coordinator_of(b.broker).wait_loaded)
        assert join(c, "secret").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert commit(c, "secret", "t", {0: 1}) == {0: ErrorCode.GROUP_AUTHORIZATION_FAILED}
        response = c.request(OFFSET_FETCH, 5, req(OFFSET_FETCH, group_id="secret", topics=None))
        assert response.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert commit(c, "open", "t", {0: 1}) == {0: 0}
        described = c.request(DESCRIBE, 5, req(DESCRIBE, groups=["secret", "open"], include_authorized_operations=True))
        assert [g.error_code for g in described.groups] == [ErrorCode.GROUP_AUTHORIZATION_FAILED, 0]
        ops = described.groups[1].authorized_operations
        assert ops == sum(1 << op for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE))
        assert [g.group_id for g in c.request(LIST, 3, req(LIST)).groups] == ["open"]
        deleted = c.request(DELETE_GROUPS, 2, req(DELETE_GROUPS, groups_names=["secret"]))
        assert deleted.results[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_groups_written_by_kafka_load_from_its_partitions(tmp_path, brokkr_broker_factory):
    log_dir = tmp_path / "kafka-data"
    for name in ("__cluster_metadata-0", "__consumer_offsets-29", "__consumer_offsets-37"):
        shutil.copytree(KAFKA_LOGS / name, log_dir / name)
    b = brokkr_broker_factory({"log.dirs": str(log_dir)})
    b.call(coordinator_of(b.broker).wait_loaded)
    with RawClient(b.bootstrap_servers) as c:
        listed = c.request(LIST, 5, req(LIST))
        described = c.request(DESCRIBE, 5, req(DESCRIBE, groups=["schema-registry", "compose-connect-group"]))
    groups = {g.group_id: (g.protocol_type, g.group_state) for g in listed.groups}
    assert set(groups) <= {"schema-registry", "compose-connect-group"}
    for g in described.groups:
        assert g.error_code == 0
        if g.group_id in groups:
            assert g.protocol_type in ("sr", "connect") and g.group_state in ("Empty", "Stable")
        else:
            assert g.group_state == "Dead", "its last record is a tombstone"
