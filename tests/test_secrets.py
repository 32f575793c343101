"""Secret settings are never shown: the rule that tells them by name, checked over every
setting brokkr and its plugins declare and over Kafka's own names; and ``brokkr serve``'s
log, DescribeConfigs (through a real AdminClient) and ``brokkr plugins`` given secrets."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from brokkr.core.broker import Broker
from brokkr.core.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigDef, ConfigType, is_sensitive, looks_secret
from brokkr.core.errors import ConfigError
from serve import Served

#: Names of Kafka (broker, client, Connect, Confluent) and Hadoop/Spark settings, by what they hold.
SECRET_NAMES = [
    "sasl.jaas.config",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config",
    "ssl.key.password",
    "ssl.keystore.key",
    "zookeeper.ssl.keystore.password",
    "password.encoder.secret",
    "password.encoder.old.secret",
    "delegation.token.master.key",
    "delegation.token.secret.key",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.client.credentials.client.secret",
    "brokkr.sink.spark.conf.spark.hadoop.fs.s3a.secret.key",
    "brokkr.sink.spark.conf.spark.hadoop.fs.s3a.access.key",
    "brokkr.sink.spark.conf.spark.hadoop.fs.s3a.session.token",
    "brokkr.sink.spark.conf.spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "brokkr.sink.spark.conf.spark.ssl.keyPassword",
    "brokkr.sink.spark.conf.spark.authenticate.secret",
    "AWS_SECRET_ACCESS_KEY",
]
PLAIN_NAMES = [
    "key.serializer",
    "key.deserializer",
    "key.converter",
    "default.key.serde",
    "confluent.key.schema.validation",
    "confluent.key.subject.name.strategy",
    "password.encoder.keyfactory.algorithm",
    "password.encoder.key.length",
    "password.encoder.iterations",
    "delegation.token.expiry.time.ms",
    "delegation.token.max.lifetime.ms",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.assertion.private.key.file",
    "ssl.keystore.location",
    "ssl.keymanager.algorithm",
    "brokkr.sink.spark.conf.spark.executor.memory",
    "brokkr.sink.spark.conf.spark.authenticate.secret.file",
    "message.max.bytes",
]


def declared() -> list[ConfigDef]:
    """Every setting core and the built-in plugins declare (broker and topic)."""
    plugins = [d for result in Broker().hook.brokkr_config_definitions() for d in result]
    return [*BROKER_CONFIGS, *TOPIC_CONFIGS, *plugins]


def test_the_rule_over_every_declared_name_and_kafkas_names():
    defs = declared()
    assert len(defs) > 150 and any(d.name == "brokkr.sink.lake" for d in defs)
    masked = sorted(d.name for d in defs if is_sensitive(d.name, d))
    assert masked == [
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.keystore.password",
        "ssl.truststore.certificates",
        "ssl.truststore.password",
    ]
    by_name = sorted(d.name for d in defs if looks_secret(d.name))
    assert by_name == ["ssl.key.password", "ssl.keystore.key", "ssl.keystore.password", "ssl.truststore.password"]
    assert all(is_sensitive(d.name, d) for d in defs if d.type is ConfigType.PASSWORD)
    assert [n for n in SECRET_NAMES if not looks_secret(n)] == []
    assert [n for n in PLAIN_NAMES if looks_secret(n)] == []
    assert is_sensitive("no.such.setting", None), "as Kafka: a setting of unknown type is sensitive"


def test_a_bad_value_of_a_secret_setting_is_not_echoed():
    with pytest.raises(ConfigError) as e:
        ConfigDef("plugin.api.key", ConfigType.INT, None, "").parse("s3cret-1")
    assert "s3cret-1" not in str(e.value) and "[hidden]" in str(e.value)
    with pytest.raises(ConfigError, match="'abc'"):
        ConfigDef("plugin.retries", ConfigType.INT, None, "").parse("abc")


SECRETS = {
    "brokkr.sink.spark.conf.spark.hadoop.fs.s3a.secret.key": "s3a-secret-5eb1",
    "ssl.keystore.password": "keystore-secret-91c4",
    "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaas-secret-07a2";',
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret-3d9f";'
    ),
}
PLAIN = {"num.partitions": "3", "brokkr.sink.spark.conf.spark.executor.memory": "2g"}


def test_serve_describe_configs_and_plugins_mask_secrets(tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource

    settings = {
        **SECRETS,
        **PLAIN,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
    }
    overrides = [f"--override={k}={v}" for k, v in settings.items()]
    served = Served(*overrides, cwd=tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": served.address.split(",")[0]})
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        configs = admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=30)
        for name in SECRETS:
            assert (configs[name].value, configs[name].is_sensitive) == (None, True), name
        for name, value in PLAIN.items():
            assert (configs[name].value, configs[name].is_sensitive) == (value, False), name
        del admin  # before the broker goes, so that it does not try to reconnect
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=20) == 0
    finally:
        served.proc.kill()
    log = served.output()
    for name in SECRETS:
        assert f"setting {name}=[hidden]" in log
    assert "setting num.partitions=3" in log
    assert [secret for secret in SECRETS.values() if secret in log] == []

    plugins = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "plugins", *overrides],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert plugins.returncode == 0, plugins.stderr
    assert "    given brokkr.sink.spark.conf.spark.hadoop.fs.s3a.secret.key=[hidden]\n" in plugins.stdout
    assert "    given brokkr.sink.spark.conf.spark.executor.memory=2g\n" in plugins.stdout
    assert [secret for secret in SECRETS.values() if secret in plugins.stdout + plugins.stderr] == []


def test_a_malformed_jaas_config_is_refused_without_quoting_it(tmp_path):
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret-3d9f;'
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "brokkr.core.cli",
            "serve",
            "--override=listeners=SASL_PLAINTEXT://127.0.0.1:0",
            f"--override=log.dirs={tmp_path / 'data'}",
            f"--override=listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "brokkr: Invalid JAAS config: unexpected text at character 77" in done.stderr
    assert "alice-secret" not in done.stderr
