"""``brokkr topics``, ``brokkr configs``, ``brokkr plugins`` and ``brokkr --version``, run as
a user runs them, against a running broker."""

from __future__ import annotations

import subprocess
import sys

import pytest


def brokkr(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "--log-level", "WARNING", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_topics_create_list_describe_alter_delete(brokkr_broker):
    server = ("--bootstrap-server", brokkr_broker.bootstrap_servers)
    done = brokkr(
        "topics", *server, "--create", "--topic", "orders", "--partitions", "2", "--config", "retention.ms=1000"
    )
    assert (done.returncode, done.stdout) == (0, "Created topic orders.\n"), done.stderr
    again = brokkr("topics", *server, "--create", "--topic", "orders")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert brokkr("topics", *server, "--list").stdout == "orders\n"

    assert brokkr("topics", *server, "--alter", "--topic", "orders", "--partitions", "3").returncode == 0
    lines = brokkr("topics", *server, "--describe", "--topic", "orders").stdout.splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ") and "PartitionCount: 3\tReplicationFactor: 1" in lines[0]
    assert lines[0].endswith("Configs: retention.ms=1000")
    assert lines[1:] == [f"\tTopic: orders\tPartition: {i}\tLeader: 0\tReplicas: 0\tIsr: 0" for i in range(3)]
    shrink = brokkr("topics", *server, "--alter", "--topic", "orders", "--partitions", "1")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr

    assert brokkr("topics", *server, "--delete", "--topic", "orders").returncode == 0
    assert brokkr("topics", *server, "--list").stdout == ""
    assert "orders" not in brokkr_broker.topics


def test_configs_describe_and_alter_a_topic(brokkr_broker):
    server = ("--bootstrap-server", brokkr_broker.bootstrap_servers)
    brokkr_broker.call(brokkr_broker.create_topic, "t")
    done = brokkr(
        "configs", *server, "--entity-type", "topics", "--entity-name", "t", "--alter",
        "--add-config", "retention.ms=5000,cleanup.policy=[delete,compact]",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "Completed updating config for topic t.\n"), done.stderr
    assert brokkr_broker.topics["t"].config["cleanup.policy"] == ["delete", "compact"]
    lines = brokkr(
        "configs", *server, "--entity-type", "topics", "--entity-name", "t", "--describe"
    ).stdout.splitlines()
    assert lines[0] == "Dynamic configs for topic t are:"
    assert "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000" in lines[2]
    done = brokkr(
        "configs",
        *server,
        "--entity-type",
        "topics",
        "--entity-name",
        "t",
        "--alter",
        "--delete-config",
        "retention.ms",
    )
    assert done.returncode == 0 and brokkr_broker.topics["t"].config.override_strings() == {
        "cleanup.policy": "delete,compact"
    }
    bad = brokkr(
        "configs", *server, "--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "nope=1"
    )
    assert bad.returncode == 1 and "INVALID_CONFIG: Unknown topic config name: nope" in bad.stderr
    broker_side = brokkr(
        "configs",
        *server,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "num.partitions=3",
    )
    assert broker_side.returncode == 1 and "Cannot update these configs dynamically" in broker_side.stderr


def test_configs_describe_and_alter_a_group(brokkr_broker):
    """kafka-configs.sh's --entity-type groups: a group's own settings (GROUP resources)."""
    server = ("--bootstrap-server", brokkr_broker.bootstrap_servers)
    group = ("--entity-type", "groups", "--entity-name", "g")
    done = brokkr(
        "configs", *server, *group, "--alter",
        "--add-config", "share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "Completed updating config for group g.\n"), done.stderr
    assert brokkr_broker.broker.group_configs.value("g", "share.auto.offset.reset") == "earliest"
    lines = brokkr("configs", *server, *group, "--describe").stdout.splitlines()
    assert lines[0] == "Dynamic configs for group g are:"
    assert any(
        line.startswith("  share.record.lock.duration.ms=20000 sensitive=false synonyms={GROUP_CONFIG:")
        for line in lines
    )
    assert brokkr("configs", *server, *group, "--alter", "--delete-config", "share.auto.offset.reset").returncode == 0
    assert brokkr_broker.broker.group_configs.value("g", "share.auto.offset.reset") == "latest"
    out_of_bounds = brokkr("configs", *server, *group, "--alter", "--add-config", "share.record.lock.duration.ms=1")
    assert out_of_bounds.returncode == 1 and "INVALID_CONFIG" in out_of_bounds.stderr
    nameless = brokkr("configs", *server, "--entity-type", "groups", "--describe")
    assert nameless.returncode == 2 and "--entity-name" in nameless.stderr


def test_version_plugins_and_help():
    version = brokkr("--version")
    assert version.returncode == 0 and version.stdout.startswith("brokkr 0.")
    listing = brokkr("plugins", "--override", "brokkr.plugins.disabled=brokkr.plugins.quota.client_quotas").stdout
    assert "brokkr.plugins.codecs.zstd (built in) from " in listing
    assert "  hooks: brokkr_codecs" in listing
    assert "example-policy (brokkr-example-policy 0.1.0)" in listing
    assert "brokkr.plugins.quota.client_quotas\n  blocked by brokkr.plugins.disabled" in listing
    assert "  setting brokkr.sink.lake (default None): " in listing
    for command in ("serve", "dump-log", "scram", "mirror", "topics", "configs", "plugins"):
        helped = brokkr(command, "--help")
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: brokkr {command}")


@pytest.mark.parametrize(
    "command", [("topics", "--list"), ("configs", "--entity-type", "topics", "--entity-name", "x", "--describe")]
)
def test_tools_say_when_no_broker_answers(command):
    done = brokkr(command[0], "--bootstrap-server", "127.0.0.1:1", *command[1:])
    assert done.returncode == 2 and done.stderr.startswith("brokkr: ") and "Traceback" not in done.stderr
