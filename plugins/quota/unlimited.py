"""The fallback quota plugin: it never throttles. Kafka's quotas are the built-in
:mod:`brokkr.plugins.quota.client_quotas`, idle until one is set; with that plugin
disabled, this one keeps ``brokkr_quota_throttle_ms`` answered."""

from __future__ import annotations

from brokkr.core.plugins import hookimpl


@hookimpl(trylast=True)
def brokkr_quota_throttle_ms() -> int:
    return 0
