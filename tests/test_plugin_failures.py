"""Plugins that cannot run say why, and plugins keep their state per broker: a missing
extra names what to install (never a traceback), a sink that cannot run stops the broker
from starting, a plugin that fails to import is named with its error; two brokers in one
process share nothing, and built-in plugins with nothing to do are not on the hot path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from brokkr.core.errors import ConfigError

BLOCK_PYSPARK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError("No module named 'pyspark'", name=name)
sys.meta_path.insert(0, _Block())
"""


def brokkr(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


@pytest.fixture
def without_pyspark(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_PYSPARK)
    return dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def test_a_sink_without_pyspark_stops_the_broker_from_starting(tmp_path, without_pyspark):
    done = brokkr(
        "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}",
        "--override", f"brokkr.sink.lake={tmp_path / 'lake'}", env=without_pyspark, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert "brokkr: brokkr.sink.lake needs pyspark: pip install 'brokkr[spark]'" in done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr


def test_a_sink_without_java_stops_the_broker_from_starting(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)  # python, and no java
    done = brokkr(
        "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}",
        "--override", f"brokkr.sink.lake={tmp_path / 'lake'}", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "needs a Java runtime (17 or newer)" in done.stderr
    assert "Traceback" not in done.stderr


def test_brokkr_mirror_without_pyspark_names_the_extra(tmp_path, without_pyspark):
    done = brokkr("mirror", "--log-dir", str(tmp_path), "--lake", str(tmp_path / "lake"), env=without_pyspark)
    assert done.returncode == 2 and "brokkr mirror needs pyspark: pip install 'brokkr[spark]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_plugin_that_fails_to_import_is_named(tmp_path):
    dist = tmp_path / "site" / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[brokkr]\nbroken = no_such_module_for_brokkr\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    done = brokkr("plugins", env=env)
    assert done.returncode == 2
    assert "entry point broken = no_such_module_for_brokkr of broken-plugin" in done.stderr
    assert "No module named 'no_such_module_for_brokkr'" in done.stderr and "Traceback" not in done.stderr


def test_a_sink_that_cannot_run_fails_an_embedded_start(brokkr_broker_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigError, match="needs a Java runtime"):
        brokkr_broker_factory({"brokkr.sink.lake": str(tmp_path / "lake")})


def test_two_brokers_in_one_process_share_nothing(brokkr_broker_factory):
    secured = brokkr_broker_factory({"authorizer.class.name": "acl", "super.users": "User:admin"})
    plain = brokkr_broker_factory()
    acl = "brokkr.plugins.auth.acl:authorizer"
    quotas = "brokkr.plugins.quota.client_quotas:manager"
    assert secured.pm.get_plugin(acl) is not None and plain.pm.get_plugin(acl) is None
    assert secured.pm.get_plugin(quotas) is not plain.pm.get_plugin(quotas)
    assert secured.pm.get_plugin(quotas).document.documents is secured.shared_documents
    assert plain.pm.get_plugin(quotas).document.documents is plain.shared_documents


def test_idle_built_in_plugins_are_not_on_the_hot_path(brokkr_broker):
    def implementers(hook):
        return {impl.plugin_name for impl in getattr(brokkr_broker.hook, hook).get_hookimpls()}

    assert not any("acl" in name for name in implementers("brokkr_authorize")), "no authorizer configured"
    for hook in ("brokkr_segment_rolled", "brokkr_high_watermark_advanced", "brokkr_after_log_append"):
        assert not any("sink" in name or "metrics" in name for name in implementers(hook)), hook
    assert brokkr_broker.hot.brokkr_request_completed is None
