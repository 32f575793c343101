"""The default quota plugin: no quotas, so nothing is ever throttled."""

from __future__ import annotations

from brokkr.core.plugins import hookimpl


@hookimpl(trylast=True)
def brokkr_quota_throttle_ms() -> int:
    return 0
