"""Client quotas as Kafka enforces them (``ClientQuotaManager``, KIP-13, KIP-55, KIP-124).

Settings come from AlterClientQuotas and are kept in the shared document ``client-quotas``
(:mod:`brokkr.core.shared_documents`): alone the broker's storage's, on a cluster the
cluster's, so a quota set through one broker holds on all (usage is still counted per
broker, as Kafka's brokers each count theirs). Three keys are enforced, each with its
own usage: ``producer_byte_rate`` (bytes produced per second), ``consumer_byte_rate``
(bytes fetched per second) and ``request_percentage`` (broker time per second, in percent
of one thread).

Which setting applies to a request, per key, is the first of these that has the key
(Kafka's precedence)::

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

and usage is pooled as Kafka pools it: a ``users/<user>`` (or ``users/<default>``)
setting is shared by all of that user's client ids, a ``clients/<client-id>`` one by
all users of that client id, a ``users/<user>/clients/<client-id>`` one (or one of
its defaults) by that pair alone.

Usage is a rate over ``quota.window.num`` samples of ``quota.window.size.seconds``
(Kafka's ``Rate`` over a ``SampledStat``: the elapsed time counts at least
``quota.window.num - 1`` whole windows, so a new client cannot burst past its quota by
measuring over a short time). When a recorded amount takes the rate above the quota, the
throttle time is Kafka's: ``(rate - quota) / quota * window``, the time after which the
rate is back at the quota if nothing more is recorded; request-time throttles are capped
at one window. A client that offers far more than its quota is held to it on average, in
bursts, as by Kafka: about ``quota.window.num - 1`` windows' worth at once, then throttled
until those windows expire. Each request costs a few dictionary lookups and O(1)
amortized work on one rate; a key nobody set costs one set lookup.
"""

from __future__ import annotations

import collections
import json
import math
import time
from collections.abc import Callable

from brokkr.core.config import ConfigDef, ConfigType, at_least
from brokkr.core.plugins import hookimpl
from brokkr.core.quotas import CLIENT_ID, KEY_OF_QUOTA_TYPE, REQUEST_PERCENTAGE, USER, QuotaEntity, quota_entity
from brokkr.core.shared_documents import FollowedDocument

STATE = "client-quotas"
#: Sensors unused this long are dropped (Kafka's INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS).
SENSOR_EXPIRY_MS = 3600 * 1000
_PERCENT_PER_MS = 100 / 1000  # request time: a millisecond is 0.1 percent-seconds of one thread


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: per-second rate of what was recorded in the
    last ``samples`` windows of ``window_ms`` each.

    Kept as the windows still holding something, oldest first, with their running total:
    a window older than ``samples`` windows is dropped (Kafka resets it to an empty window
    starting now, which is the same for the rate), so recording and measuring cost O(1)
    amortized instead of a pass over every sample."""

    __slots__ = ("samples", "window_ms", "_expire_ms", "_windows", "_total", "last_record_ms")

    def __init__(self, samples: int, window_ms: int, now_ms: float):
        self.samples = samples
        self.window_ms = window_ms
        self._expire_ms = samples * window_ms
        self._windows: collections.deque[list[float]] = collections.deque([[now_ms, 0.0]])  # [start, value]
        self._total = 0.0
        self.last_record_ms = now_ms

    def record(self, value: float, now_ms: float) -> None:
        windows = self._windows
        current = windows[-1]
        end = current[0] + self.window_ms
        if now_ms >= end:  # the current window is complete: the next starts on the same grid
            current = [now_ms - (now_ms - end) % self.window_ms, 0.0]
            windows.append(current)
            if len(windows) > self.samples:
                self._total -= windows.popleft()[1]
        current[1] += value
        self._total += value
        self.last_record_ms = now_ms

    def window_ms_at(self, now_ms: float) -> float:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``): since the start
        of the oldest window, but at least ``samples - 1`` whole windows and a part."""
        windows = self._windows
        while windows and now_ms - windows[0][0] >= self._expire_ms:
            self._total -= windows.popleft()[1]
        if not windows:  # all expired: Kafka's samples all restart now, empty
            windows.append([now_ms, 0.0])
            self._total = 0.0
        elapsed = now_ms - windows[0][0]
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> tuple[float, float]:
        """(the rate per second, the window it was measured over in ms)."""
        window = self.window_ms_at(now_ms)
        return self._total / (window / 1000), window


_U, _C, _DEFAULT, _NONE = "user", "client", "default", "none"
#: Kafka's order of precedence: (the entity's user, its client id) to look up, then how
#: usage is pooled under it, each part the request's user or client id (_U, _C),
#: <default> (_DEFAULT), or not part of the entity / not pooled by (_NONE).
_PRECEDENCE = (
    ((_U, _C), (_U, _C)),
    ((_U, _DEFAULT), (_U, _C)),
    ((_U, _NONE), (_U, _NONE)),
    ((_DEFAULT, _C), (_U, _C)),
    ((_DEFAULT, _DEFAULT), (_U, _C)),
    ((_DEFAULT, _NONE), (_U, _NONE)),
    ((_NONE, _C), (_NONE, _C)),
    ((_NONE, _DEFAULT), (_NONE, _C)),
)
#: Cached lookups kept at most, so that clients cycling client ids cannot grow it forever.
_MAX_RESOLVED = 100_000


class ClientQuotaManager:
    """One broker's quota settings (the store AlterClientQuotas changes) and usage,
    registered as a plugin of that broker (``brokkr_broker_starting``)."""

    @hookimpl
    def brokkr_quota_throttle_ms(self, context, usage):
        self.document.follow()
        if not self._keys_set:  # no quota set anywhere: nothing to record
            return None
        user, client_id = context.principal.name, context.client_id or ""
        return max(self.record(quota_type, user, client_id, amount) for quota_type, amount in usage.items())

    @hookimpl(trylast=True)  # a built-in default: another plugin's store wins
    def brokkr_client_quota_store(self):
        return self

    def __init__(self, documents, samples: int, window_ms: int, clock: Callable[[], float] = time.monotonic):
        self.samples = samples
        self.window_ms = window_ms
        self._clock = clock
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._keys_set: frozenset[str] = frozenset()
        # (key, user, client id) -> (sensor tags, quota) or None; cleared on every change
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float] | None] = {}
        self._sensors: dict[tuple[str, str, str], Rate] = {}
        self._next_sweep_ms = 0.0
        #: Where the settings are kept: ``broker.shared_documents`` (or a storage), read again
        #: when another broker changed them.
        self.document = FollowedDocument(documents, STATE, self._load)
        self.document.follow()

    def _load(self, text: str | None) -> None:
        entries = json.loads(text)["quotas"] if text else []
        self._set({quota_entity((k, v) for k, v in e["entity"]): e["values"] for e in entries})

    # -- the ClientQuotaStore -------------------------------------------------------------

    def quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        self.document.follow()
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def alter(self, changes: dict[QuotaEntity, dict[str, float | None]]):
        """None once written (a storage), else (shared documents) an awaitable to await."""
        quotas = self.quotas()
        for entity, ops in changes.items():
            values = quotas.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if not values:
                del quotas[entity]
        entries = [{"entity": [list(pair) for pair in e], "values": v} for e, v in sorted(quotas.items(), key=str)]
        self._set(quotas)
        return self.document.write(json.dumps({"version": 1, "quotas": entries}, indent=1))

    def _set(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        self._quotas = quotas
        self._keys_set = frozenset(key for values in quotas.values() for key in values)
        self._resolved = {}
        self._sensors = {k: s for k, s in self._sensors.items() if k[0] in self._keys_set}

    # -- enforcement ----------------------------------------------------------------------

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The setting of ``key`` that applies to the pair, with how usage is pooled
        (``(user or "", client id or "")``), or None when no setting applies."""
        name = {_U: user, _C: client_id, _DEFAULT: None}
        for (u, c), (pool_u, pool_c) in _PRECEDENCE:
            entity = quota_entity(
                [*(((USER, name[u]),) if u != _NONE else ()), *(((CLIENT_ID, name[c]),) if c != _NONE else ())]
            )
            values = self._quotas.get(entity)
            if values is not None and key in values:
                return (user if pool_u == _U else "", client_id if pool_c == _C else ""), values[key]
        return None

    def record(self, quota_type: str, user: str, client_id: str, amount: float) -> int:
        """Record ``amount`` of a ``brokkr_quota_throttle_ms`` quota type; the throttle time in ms."""
        key = KEY_OF_QUOTA_TYPE.get(quota_type)
        if key not in self._keys_set:
            return 0
        lookup = (key, user, client_id)
        try:
            resolved = self._resolved[lookup]
        except KeyError:
            if len(self._resolved) >= _MAX_RESOLVED:
                self._resolved = {}
            resolved = self._resolved[lookup] = self.quota_for(key, user, client_id)
        if resolved is None:
            return 0
        tags, quota = resolved
        now = self._clock() * 1000
        sensor_key = (key, *tags)
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = Rate(self.samples, self.window_ms, now)
            if now >= self._next_sweep_ms:
                self._sweep(now)
        if key == REQUEST_PERCENTAGE:
            amount *= _PERCENT_PER_MS
        sensor.record(amount, now)
        rate, window = sensor.measure(now)
        if rate <= quota:
            return 0
        throttle = (rate - quota) / quota * window
        if key == REQUEST_PERCENTAGE:  # Kafka bounds only request-time throttles, to one window
            throttle = min(throttle, self.window_ms)
        return math.floor(throttle + 0.5)

    def _sweep(self, now: float) -> None:
        """Drop sensors idle for an hour, and the lookups that led to them (checked at most
        once a minute, when a sensor is created)."""
        idle = [k for k, s in self._sensors.items() if now - s.last_record_ms >= SENSOR_EXPIRY_MS]
        for k in idle:
            del self._sensors[k]
        if idle:
            self._resolved = {}
        self._next_sweep_ms = now + 60_000


# -- the plugin ---------------------------------------------------------------------------


@hookimpl
def brokkr_config_definitions():
    return [
        ConfigDef("quota.window.num", ConfigType.INT, 11, "Samples kept for client quotas.", validator=at_least(1)),
        ConfigDef(
            "quota.window.size.seconds",
            ConfigType.INT,
            1,
            "The time span of each client quota sample, in seconds.",
            validator=at_least(1),
        ),
    ]


@hookimpl
def brokkr_broker_starting(broker):
    """Each broker gets its own quota manager, registered as a plugin of that broker."""
    config = broker.config
    window_ms = config["quota.window.size.seconds"] * 1000
    manager = ClientQuotaManager(broker.shared_documents, config["quota.window.num"], window_ms)
    broker.pm.register(manager, name="brokkr.plugins.quota.client_quotas:manager")
