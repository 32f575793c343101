"""``brokkr reassign-partitions`` and ``brokkr leader-election`` (Kafka's
kafka-reassign-partitions.sh and kafka-leader-election.sh) on a cluster of three brokers."""

from __future__ import annotations

import json

import pytest
from brokkr.core.cli import main
from brokkr.core.testing import CLUSTER_SETTINGS

from tests.cluster.test_replication import DEADLINE, FollowersRefused, bootstrap, consume_all, leaders
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def brokkr(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["--log-level", "WARNING", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assignment(*partitions: tuple[str, int, list[int]]) -> str:
    """Kafka's reassignment JSON, as its tool prints it."""
    entries = [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for t, p, r in partitions]
    return json.dumps({"version": 1, "partitions": entries}, separators=(",", ":"))


def create(brokers, name: str, replicas: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(name, len(replicas), replica_assignment=replicas)])[name].result(DEADLINE)
    wait_for(f"leaders of {name}", lambda: leaders(brokers, name, len(replicas)))


def test_a_reassignment_generated_executed_and_verified(brokkr_cluster, tmp_path, capsys):
    brokers = brokkr_cluster(3)
    server = ("--bootstrap-server", brokers[0].bootstrap_servers)
    create(brokers, "mv", [[1, 2], [2, 1]])
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(20):
        producer.produce("mv", b"%02d" % i, partition=i % 2)
    assert producer.flush(DEADLINE) == 0
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "mv"}], "version": 1}')

    status, out, err = brokkr(
        capsys, "reassign-partitions", *server, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "2,3"
    )  # fmt: skip
    assert (status, err) == (0, "")
    head, current, blank, title, proposed = out.splitlines()
    assert (head, blank, title) == (
        "Current partition replica assignment",
        "",
        "Proposed partition reassignment configuration",
    )
    assert current == assignment(("mv", 0, [1, 2]), ("mv", 1, [2, 1]))
    plan = {p["partition"]: p["replicas"] for p in json.loads(proposed)["partitions"]}
    assert sorted(plan) == [0, 1] and all(sorted(r) == [2, 3] for r in plan.values())
    assert {r[0] for r in plan.values()} == {2, 3}, "the leaders spread over the brokers"
    moves = tmp_path / "moves.json"
    moves.write_text(proposed)

    status, out, err = brokkr(
        capsys, "reassign-partitions", *server, "--execute", "--reassignment-json-file", str(moves)
    )
    assert (status, err) == (0, "")
    assert out == (
        f"Current partition replica assignment\n\n{current}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignments for mv-0,mv-1\n"
    )
    verify = ("reassign-partitions", *server, "--verify", "--reassignment-json-file", str(moves))
    done = "Status of partition reassignment:\nReassignment of partition mv-0 is completed.\nReassignment of partition mv-1 is completed.\n"
    wait_for("the moves to complete", lambda: brokkr(capsys, *verify) == (0, done, ""))
    wanted = {p: sorted(r) for p, r in plan.items()}
    wait_for("every broker to tell the new replicas", lambda: (m := leaders(brokers, "mv", 2)) and {
        p: replicas for p, (_, replicas, _) in m.items()
    } == wanted)  # fmt: skip
    assert wait_for(
        "broker 1's replicas to go", lambda: all(brokers[0].broker.partition("mv", p) is None for p in (0, 1))
    )
    assert sorted(consume_all(brokers, "mv", 2, 20)) == [b"%02d" % i for i in range(20)]
    assert brokkr(capsys, "reassign-partitions", *server, "--list") == (0, "No partition reassignments found.\n", "")

    status, out, _ = brokkr(
        capsys, "reassign-partitions", *server, "--execute", "--reassignment-json-file", str(topics)
    )
    assert status == 1 and out == ""
    moves.write_text(assignment(("mv", 0, [1, 9])))
    status, _, err = brokkr(capsys, "reassign-partitions", *server, "--execute", "--reassignment-json-file", str(moves))
    assert (status, err) == (1, "Unknown broker id 9\n")


def test_a_reassignment_under_way_is_listed_verified_and_cancelled(brokkr_cluster, tmp_path, capsys):
    refusal = FollowersRefused()
    brokers = brokkr_cluster(3, plugins=(refusal,))
    server = ("--bootstrap-server", brokers[0].bootstrap_servers)
    create(brokers, "mv", [[1, 2]])
    refusal.refusing.set()  # no follower fetches: broker 3 cannot catch up, so the move stays under way
    moves = tmp_path / "moves.json"
    moves.write_text(assignment(("mv", 0, [1, 2, 3])))
    assert brokkr(capsys, "reassign-partitions", *server, "--execute", "--reassignment-json-file", str(moves))[0] == 0

    status, out, _ = brokkr(capsys, "reassign-partitions", *server, "--list")
    assert (status, out) == (0, "Current partition reassignments:\nmv-0: replicas: 1,2,3. adding: 3.\n")
    again = brokkr(capsys, "reassign-partitions", *server, "--execute", "--reassignment-json-file", str(moves))
    assert again[0] == 1 and again[2].startswith("Cannot execute because there is an existing partition assignment.")
    verify = ("reassign-partitions", *server, "--verify", "--reassignment-json-file", str(moves))
    assert (
        brokkr(capsys, *verify)[1]
        == "Status of partition reassignment:\nReassignment of partition mv-0 is still in progress.\n"
    )

    cancel = ("reassign-partitions", *server, "--cancel", "--reassignment-json-file", str(moves))
    assert brokkr(capsys, *cancel) == (0, "Successfully cancelled partition reassignment for: mv-0\n", "")
    refusal.refusing.clear()
    wait_for("the replicas before the move", lambda: (m := leaders(brokers, "mv", 1)) and m[0][1] == [1, 2])
    assert brokkr(capsys, *verify)[1] == (
        "Status of partition reassignment:\n"
        "There is no active reassignment of partition mv-0, but replica set is 1,2 rather than 1,2,3.\n"
    )
    assert brokkr(capsys, *cancel)[1] == "None of the specified partition reassignments are active.\n"


def test_a_preferred_leader_election_after_the_leader_moved(brokkr_cluster, brokkr_broker_factory, tmp_path, capsys):
    brokers = brokkr_cluster(3, auto_leader_rebalance_enable=False)
    create(brokers, "e", [[1, 2, 3]])
    config = {k: brokers[0].broker.config[k] for k in ("node.id", "zookeeper.connect", "log.dirs")}
    brokers[0].stop()
    alive = brokers[1:]
    assert wait_for("a new leader", lambda: (m := leaders(alive, "e", 1)) and m[0][0] in (2, 3))
    back = brokkr_broker_factory(
        {**config, "log.dirs": ",".join(config["log.dirs"]), **CLUSTER_SETTINGS, "auto.leader.rebalance.enable": False}
    )
    brokers = [back, *alive]
    wait_for("broker 1 back in sync", lambda: (m := leaders(brokers, "e", 1)) and m[0][2] == [1, 2, 3])
    assert leaders(brokers, "e", 1)[0][0] != 1, "the leader stays where it moved"
    server = ("--bootstrap-server", alive[0].bootstrap_servers)

    elect = ("leader-election", *server, "--election-type", "preferred")
    assert brokkr(capsys, *elect, "--topic", "e", "--partition", "0") == (
        0, "Successfully completed leader election (PREFERRED) for partitions e-0\n", ""
    )  # fmt: skip
    wait_for("broker 1 to lead again", lambda: (m := leaders(brokers, "e", 1)) and m[0][0] == 1)
    assert brokkr(capsys, *elect, "--all-topic-partitions") == (0, "", ""), "nothing left to elect"
    partitions = tmp_path / "partitions.json"
    partitions.write_text('{"partitions": [{"topic": "e", "partition": 0}, {"topic": "e", "partition": 7}]}')
    status, out, err = brokkr(capsys, *elect, "--path-to-json-file", str(partitions))
    assert status == 1 and out.splitlines() == [
        "Valid replica already elected for partitions e-0",
        "Error completing leader election (PREFERRED) for partition: e-7: UNKNOWN_TOPIC_OR_PARTITION: "
        "The partition e-7 does not exist.",
    ]
    assert err == "1 replica(s) could not be elected\n"
    status, _, err = brokkr(capsys, *elect, "--topic", "e")
    assert (status, err) == (1, "Missing required option(s): partition\n")
