"""``brokkr.plugins``: plugins loaded by name, without packaging (importable modules or
``module:object``, as pytest's ``-p``), for a quick try or a deployment without entry
points; an entry that does not load stops the start with a line saying which and why."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from brokkr.core.broker import Broker
from brokkr.core.errors import ConfigError
from serve import Served

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402

#: A plugin module of one's own, in the directory the broker is started from.
FROZEN = """
    from brokkr.core.authorization import AclOperation, AuthorizationResult
    from brokkr.core.plugins import hookimpl


    class ReadOnly:
        def __init__(self, prefix):
            self.prefix = prefix

        @hookimpl
        def brokkr_authorize(self, actions):
            return [
                AuthorizationResult.DENIED
                if a.operation == AclOperation.WRITE and a.resource_name.startswith(self.prefix)
                else None
                for a in actions
            ]


    frozen = ReadOnly("frozen.")
"""


def produce_error(bootstrap: str, topic: str):
    outcome = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(10) == 0
    return outcome[0]


def test_a_module_object_named_in_the_setting_is_loaded_and_logged(tmp_path):
    (tmp_path / "my_policy.py").write_text(textwrap.dedent(FROZEN))
    served = Served(
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "--override",
        "brokkr.plugins=my_policy:frozen",
        cwd=tmp_path,  # python -m puts it on sys.path (the brokkr script needs PYTHONPATH=.)
    )
    try:
        assert produce_error(served.address, "frozen.orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_error(served.address, "orders") is None
    finally:
        served.kill()
    assert "INFO brokkr: plugin my_policy:frozen (brokkr.plugins) from my_policy\n" in served.output()


def test_a_module_also_loaded_by_its_entry_point_is_registered_once(tmp_path):
    broker = Broker({"brokkr.plugins": "brokkr_example_policy", "log.dirs": str(tmp_path)})
    plugin = broker.pm.get_plugin("example-policy")
    assert plugin is not None and broker.pm.get_name(plugin) == "example-policy"
    assert broker.pm.get_plugin("brokkr_example_policy") is None


@pytest.mark.parametrize(
    "entry, refusal",
    [
        (
            "no_such_plugin_module",
            "brokkr.plugins: cannot import no_such_plugin_module: No module named 'no_such_plugin_module' "
            "(a module of the current directory needs PYTHONPATH=.)",
        ),
        ("json:no_such_object", "brokkr.plugins: json has no no_such_object (json:no_such_object)"),
        ("json:", "brokkr.plugins: 'json:' is neither a module nor module:object"),
    ],
)
def test_an_entry_that_does_not_load_is_named_with_why(entry, refusal, tmp_path):
    with pytest.raises(ConfigError) as refused:
        Broker({"brokkr.plugins": entry, "log.dirs": str(tmp_path)})
    assert str(refused.value) == refusal


def test_brokkr_serve_stops_at_start_on_a_plugin_that_does_not_load(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "serve", "--override", "brokkr.plugins=no_such_plugin_module"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("brokkr: brokkr.plugins: cannot import no_such_plugin_module: "), done.stderr
    assert not (tmp_path / "data").exists(), "stopped before opening anything"
