"""Each built-in plugin blocked with ``brokkr.plugins.disabled``: an essential one is refused
at start with one clear line; an optional one leaves a broker that real clients produce to
and consume from. The roles and their reasons: ``BUILTIN_ROLES`` in core/plugins.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import BUILTIN_PLUGINS, BUILTIN_ROLES
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from test_acls import ck_conf, secure_config

#: Never blocked, whatever the settings.
ESSENTIAL = {
    "brokkr.core.default_decoder",
    "brokkr.core.apis.builtin",
    "brokkr.core.validation",
    "brokkr.core.append",
    "brokkr.plugins.codecs.none",
}
#: Essential while settings use them: such settings (beside the fixture's PLAINTEXT listener).
IN_USE = {
    "brokkr.plugins.codecs.gzip": {"compression.type": "gzip"},
    "brokkr.plugins.codecs.snappy": {"compression.type": "snappy"},
    "brokkr.plugins.codecs.lz4": {"compression.type": "lz4"},
    "brokkr.plugins.codecs.zstd": {"compression.type": "zstd"},
    "brokkr.plugins.storage.memory": {"brokkr.storage": "memory"},
    "brokkr.plugins.storage.segment": {},  # brokkr.storage=segment, the default
    "brokkr.plugins.auth.allow_all": {},  # a PLAINTEXT listener and no authorizer, the defaults
    "brokkr.plugins.auth.ssl_principal": {"listeners": "SSL://127.0.0.1:0"},
    "brokkr.plugins.auth.acl": {"authorizer.class.name": "acl"},
    # refused before any connection is tried: no ZooKeeper needs to run there
    "brokkr.plugins.cluster.zookeeper": {"zookeeper.connect": "127.0.0.1:1"},
}
#: Settings that leave a plugin of IN_USE unused when the defaults use it.
UNUSED = {
    "brokkr.plugins.storage.segment": {"brokkr.storage": "memory"},
    "brokkr.plugins.auth.allow_all": secure_config(),  # SASL_PLAINTEXT only, the ACL authorizer
}
REFUSED_BY_DEFAULT = ESSENTIAL | {name for name, settings in IN_USE.items() if not settings}


def produce_and_consume(conf: dict) -> None:
    """One record through a real producer (acks=all, its topic created by Metadata) and
    back through a real consumer, each given up after seconds."""
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 10000})
    delivered: list = []
    producer.produce("blocked", b"still served", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(15) == 0
    assert len(delivered) == 1 and delivered[0] is None, delivered[0]
    consumer = Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("blocked", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                assert msg.value() == b"still served"
                return
        raise AssertionError("nothing consumed")
    finally:
        consumer.close()


def plaintext(broker) -> dict:
    return {"bootstrap.servers": broker.bootstrap_servers, "log_level": 3}


def test_every_builtin_has_a_role_and_this_test_knows_it():
    assert set(BUILTIN_ROLES) == set(BUILTIN_PLUGINS), "a built-in needs a role in BUILTIN_ROLES, and only a built-in"
    assert all(role.does for role in BUILTIN_ROLES.values())
    assert {name for name, role in BUILTIN_ROLES.items() if role.essential} == ESSENTIAL
    assert {name for name, role in BUILTIN_ROLES.items() if role.in_use is not None} == set(IN_USE)


@pytest.mark.parametrize("name", BUILTIN_PLUGINS)
def test_blocking_each_builtin_with_the_default_settings(brokkr_broker_factory, name):
    blocked = {"brokkr.plugins.disabled": name}
    if name in REFUSED_BY_DEFAULT:
        with pytest.raises(ConfigError, match=f"^brokkr.plugins.disabled: {re.escape(name)} is essential"):
            brokkr_broker_factory(blocked)
    else:
        broker = brokkr_broker_factory(blocked)
        assert broker.broker.pm.get_plugin(name) is None
        produce_and_consume(plaintext(broker))


@pytest.mark.parametrize("name", [name for name, settings in IN_USE.items() if settings])
def test_blocking_a_builtin_that_the_settings_use_is_refused(brokkr_broker_factory, name):
    with pytest.raises(ConfigError, match=f"^brokkr.plugins.disabled: {re.escape(name)} is essential while "):
        brokkr_broker_factory({**IN_USE[name], "brokkr.plugins.disabled": name})


@pytest.mark.parametrize("name", UNUSED)
def test_blocking_a_builtin_that_the_settings_do_not_use(brokkr_broker_factory, name):
    settings = UNUSED[name]
    disabled = ",".join(filter(None, [settings.get("brokkr.plugins.disabled"), name]))
    broker = brokkr_broker_factory({**settings, "brokkr.plugins.disabled": disabled})
    produce_and_consume(ck_conf(broker, "admin") if name.endswith("allow_all") else plaintext(broker))


def test_serve_refuses_to_block_an_essential_builtin_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", "brokkr.plugins.disabled=brokkr.core.validation"],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "brokkr: brokkr.plugins.disabled: brokkr.core.validation is essential and cannot be blocked: "
        "it validates every produced batch and gives it its offsets (brokkr_validate_records)"
    ]
