"""``brokkr share-groups``, run as a user runs it, against a broker with a real
``ShareConsumer``: list, describe (members, state, start offsets), reset start offsets (a
dry run, then executed), delete offsets and the group, and Kafka's tool's refusals."""

from __future__ import annotations

import pytest
from brokkr.core.testing import RawClient

from tests.test_group_tool import table
from tests.test_share_group_admin import broker, commit_classic, joined  # noqa: F401 (the fixture)
from tests.test_share_group_membership import describe, find_coordinator
from tests.test_tools import brokkr
from tests.waiting import wait_for

pytest.importorskip("confluent_kafka")


def test_list_describe_reset_and_delete(broker):  # noqa: F811
    server = ("share-groups", "--bootstrap-server", broker.bootstrap_servers)
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "s")
        consumer = joined(broker, client, "s")
        try:
            listed = brokkr(*server, "--list")
            assert listed.returncode == 0 and listed.stdout.split() == ["s"]
            consumer_groups = ("consumer-groups", "--bootstrap-server", broker.bootstrap_servers, "--list")
            assert "s" not in brokkr(*consumer_groups).stdout.split(), "a share group is no consumer group"
            assert table(brokkr(*server, "--list", "--state").stdout) == [["GROUP", "STATE"], ["s", "Stable"]]
            members = table(brokkr(*server, "--describe", "--group", "s", "--members").stdout)
            assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
            [row] = members[1:]
            assert (row[0], row[3], row[4], row[5]) == ("s", "rdkafka", "1", "q:0")
            state = table(brokkr(*server, "--describe", "--group", "s", "--state").stdout)
            assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
            assert (state[1][0], state[1][-2:]) == ("s", ["Stable", "1"])
            busy = brokkr(*server, "--reset-offsets", "--group", "s", "--topic", "q", "--to-earliest", "--execute")
            assert busy.returncode == 1 and "Share group 's' is not empty." in busy.stderr
        finally:
            consumer.close()
        wait_for("the group empty", lambda: describe(client, "s").group_state == "Empty")

    started = table(brokkr(*server, "--describe", "--group", "s").stdout)
    assert started[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"] and started[1][:3] == ["s", "q", "0"]
    dry = brokkr(*server, "--reset-offsets", "--group", "s", "--topic", "q", "--to-offset", "3")
    assert "--execute option is missing" in dry.stderr
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["s", "q", "0", "3"]]
    assert table(brokkr(*server, "--describe", "--group", "s").stdout) == started, "the dry run changed nothing"
    done = brokkr(*server, "--reset-offsets", "--group", "s", "--all-topics", "--to-earliest", "--execute")
    assert done.returncode == 0 and table(done.stdout)[1] == ["s", "q", "0", "0"]
    verbose = table(brokkr(*server, "--describe", "--group", "s", "--verbose").stdout)
    assert verbose[0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    assert verbose[1][:3] + verbose[1][4:5] == ["s", "q", "0", "0"]

    deleted = brokkr(*server, "--delete-offsets", "--group", "s", "--topic", "q")
    assert table(deleted.stdout) == [["TOPIC", "STATUS"], ["q", "Successful"]]
    assert "Share group 's' has no offset information." in brokkr(*server, "--describe", "--group", "s").stdout
    gone = brokkr(*server, "--delete", "--group", "s")
    assert gone.stdout.strip() == "Deletion of requested share groups ('s') was successful."
    missing = brokkr(*server, "--describe", "--group", "s")
    assert missing.returncode == 1 and "Share group 's' does not exist." in missing.stderr


def test_delete_touches_share_groups_only(broker):  # noqa: F811
    """As kafka-share-groups.sh: a group of another type, or a share group with members, is
    refused before any DeleteGroups is sent (which would delete a group of any type)."""
    server = ("share-groups", "--bootstrap-server", broker.bootstrap_servers)
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "classic")
        commit_classic(client, "classic")
        consumer = joined(broker, client, "busy")
        try:
            refused = brokkr(*server, "--delete", "--group", "classic", "--group", "busy")
        finally:
            consumer.close()
    assert refused.returncode == 1 and "Deletion of some share groups failed" in refused.stderr
    assert "* Group 'classic' could not be deleted due to: Group 'classic' is not a share group." in refused.stdout
    assert "* Group 'busy' could not be deleted due to: Share group 'busy' is not EMPTY." in refused.stdout
    consumer_groups = ("consumer-groups", "--bootstrap-server", broker.bootstrap_servers, "--list")
    assert "classic" in brokkr(*consumer_groups).stdout.split(), "the classic group and its offsets are still there"
