"""An example quota policy, loaded through the ``brokkr`` entry point: one produce byte-rate
per client-id prefix, shared by every client whose id starts with it::

    brokkr serve --override fair.quota.rates=batch-:1000000,etl-:250000

All ``batch-*`` producers together get 1 MB/s and all ``etl-*`` ones 250 kB/s (the first
matching prefix counts); other clients are not limited by this plugin. Each prefix is a
token bucket holding at most one second of its rate: a request that overdraws it is still
appended, then throttled until the bucket is back to zero, so the client's next request
waits (KIP-219). Kafka's own quotas (AlterClientQuotas) still apply alongside: the
broker throttles for the longer of the two.
"""

from __future__ import annotations

import time

from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.plugins import hookimpl


class Bucket:
    def __init__(self, rate: float):
        self.rate = rate
        self.tokens = rate
        self.last = time.monotonic()

    def take(self, amount: float) -> int:
        """Take ``amount`` bytes; the milliseconds until the bucket is no longer overdrawn."""
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate) - amount
        self.last = now
        return 0 if self.tokens >= 0 else round(-self.tokens / self.rate * 1000)


def parse_rates(entries: list[str]) -> dict[str, float]:
    """``["batch-:1000000"]`` -> ``{"batch-": 1000000.0}``."""
    rates = {}
    for entry in entries:
        prefix, _, rate = entry.rpartition(":")
        if not prefix or not rate.isdigit() or int(rate) <= 0:
            raise ValueError(f"{entry!r} is not <client-id prefix>:<bytes per second>")
        rates[prefix] = float(rate)
    return rates


@hookimpl
def brokkr_config_definitions():
    return [
        ConfigDef(
            "fair.quota.rates",
            ConfigType.LIST,
            [],
            "Produce byte-rates per client-id prefix: prefix:bytes-per-second,...",
            validator=parse_rates,
        )
    ]


class FairQuota:
    """One broker's buckets, registered as a plugin of that broker: two brokers in one
    process share nothing, and a broker without rates pays nothing per request."""

    def __init__(self, rates: dict[str, float]):
        self.buckets = {prefix: Bucket(rate) for prefix, rate in rates.items()}

    @hookimpl
    def brokkr_quota_throttle_ms(self, context, usage):
        amount = usage.get("produce")
        if amount is None:
            return None
        client_id = context.client_id or ""
        for prefix, bucket in self.buckets.items():
            if client_id.startswith(prefix):
                return bucket.take(amount)
        return None


@hookimpl
def brokkr_broker_starting(broker):
    rates = parse_rates(broker.config["fair.quota.rates"])
    if rates:
        broker.pm.register(FairQuota(rates), name="fair-quota:buckets")
