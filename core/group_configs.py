"""Per-group settings (Kafka's GroupConfig, KIP-848/KIP-932): the GROUP config resources
(resource type 32) of IncrementalAlterConfigs, AlterConfigs and DescribeConfigs.

A group's own value overrides the broker's for that group alone: ``share.X`` overrides
``group.share.X`` (``consumer.X``: ``group.consumer.X``) and must stay within the broker's
``group.share.min.X`` .. ``group.share.max.X`` (INVALID_CONFIG with Kafka's message). Three
settings exist only per group: ``share.auto.offset.reset`` (latest),
``share.isolation.level`` (read_uncommitted), ``share.renew.acknowledge.enable`` (true).
``share.assignment.interval.ms`` and ``consumer.assignment.interval.ms`` are taken at 0 only,
what brokkr does (it assigns at once), as their broker settings are
(:data:`brokkr.core.config.ASSIGNS_AT_ONCE`).

:class:`GroupConfigs` is on the broker (``broker.group_configs``); whoever needs a group's
setting asks :meth:`GroupConfigs.value`. The overrides are kept in the storage document
``group-configs`` (read at first use), so they outlive a restart; on a cluster the
membership keeps them for every broker (ZooKeeper's ``/config/groups/<group>``, watched), as
it keeps topic settings. A group need not exist to have them, as in Kafka.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from .config import ASSIGNS_AT_ONCE, ConfigDef, ConfigSource, ConfigType, at_least, format_value, one_of, only
from .errors import BrokkrError, ConfigError, ErrorCode

log = logging.getLogger("brokkr.groups")

#: ConfigResource.Type.GROUP, DescribeConfigs' ConfigSource.GROUP_CONFIG.
GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8
#: The storage document of the groups' own settings.
STORE = "group-configs"

_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)(?:[.,](?P<f>\d{1,9}))?S)?)?",
    re.IGNORECASE,
)


def by_duration_ms(value: str) -> int | None:
    """The milliseconds of a ``by_duration:<ISO-8601 duration>`` reset strategy (Java's
    Duration.parse, days to seconds, no sign); None for any other value."""
    if not value.lower().startswith("by_duration:"):
        return None
    text = value.split(":", 1)[1].strip()
    match = _DURATION.fullmatch(text)
    if match is None or text.upper() in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    part = {k: int(v) if v else 0 for k, v in match.groupdict().items() if k != "f"}
    fraction = int((match["f"] or "0").ljust(9, "0")[:3])
    return ((part["d"] * 24 + part["h"]) * 60 + part["m"]) * 60_000 + part["s"] * 1000 + fraction


def _auto_offset_reset(value: str) -> None:
    try:
        if value.lower() in ("earliest", "latest") or by_duration_ms(value) is not None:
            return
    except ValueError:
        pass
    raise ValueError(
        f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
        "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
    )


I, S, B = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN


def _synonym(name: str, doc: str, minimum: int) -> ConfigDef:
    return ConfigDef(name, I, None, doc, synonym=f"group.{name}", validator=at_least(minimum))


def _assignment_interval(kind: str) -> ConfigDef:
    doc = f"Least time between two assignments of the {kind} group: 0, assigned at once."
    synonym = f"group.{kind}.assignment.interval.ms"
    return ConfigDef(f"{kind}.assignment.interval.ms", I, None, doc, synonym, only(0, why=ASSIGNS_AT_ONCE))


#: Kafka's group settings brokkr takes; those with a synonym default to that broker setting.
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _synonym("consumer.session.timeout.ms", "The consumer group's session timeout.", 1),
        _synonym("consumer.heartbeat.interval.ms", "The consumer group's heartbeat interval.", 1),
        _synonym("share.session.timeout.ms", "The share group's session timeout.", 1),
        _synonym("share.heartbeat.interval.ms", "The share group's heartbeat interval.", 1),
        _synonym("share.record.lock.duration.ms", "How long records stay acquired by one share consumer.", 1000),
        _synonym("share.delivery.count.limit", "How many times a record may be delivered.", 2),
        _synonym("share.partition.max.record.locks", "Most records in flight per share partition.", 100),
        _assignment_interval("consumer"),
        _assignment_interval("share"),
        ConfigDef(
            "share.auto.offset.reset",
            S,
            "latest",
            "Where a share partition starts without state: earliest, latest or by_duration:<PnDTnHnMn.nS>.",
            validator=_auto_offset_reset,
        ),
        ConfigDef(
            "share.isolation.level",
            S,
            "read_uncommitted",
            "read_committed: only committed transactional records are delivered; read_uncommitted: all.",
            validator=one_of("read_committed", "read_uncommitted"),
        ),
        ConfigDef("share.renew.acknowledge.enable", B, True, "Whether the group accepts the Renew acknowledge type."),
    )
}
#: The settings the broker bounds (GroupConfig.validateValues): ``share.X`` within
#: ``group.share.min.X`` .. ``group.share.max.X``, with Kafka's defaults of those two, used
#: when a broker lacks them (their plugin not loaded).
_BOUNDS = {
    "consumer.session.timeout.ms": (45000, 60000),
    "consumer.heartbeat.interval.ms": (5000, 15000),
    "share.session.timeout.ms": (45000, 60000),
    "share.heartbeat.interval.ms": (5000, 15000),
    "share.record.lock.duration.ms": (15000, 60000),
    "share.delivery.count.limit": (2, 10),
    "share.partition.max.record.locks": (100, 4000),
    "share.assignment.interval.ms": (0, 15000),
    "consumer.assignment.interval.ms": (0, 15000),
}


def _bound_names(name: str) -> tuple[str, str]:
    kind, rest = name.split(".", 1)
    return f"group.{kind}.min.{rest}", f"group.{kind}.max.{rest}"


#: Kafka's defaults of the broker settings behind the synonyms, for the same reason.
_BROKER_DEFAULTS = {
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.share.session.timeout.ms": 45000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2000,
    "group.share.assignment.interval.ms": 0,
    "group.consumer.assignment.interval.ms": 0,
}
_SESSION_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)


class GroupConfigs:
    """The groups' own settings on one broker (``broker.group_configs``)."""

    def __init__(self, broker):
        self.broker = broker
        self._overrides: dict[str, dict[str, Any]] | None = None
        #: On a cluster: the membership's settings last parsed, and what they parsed to.
        self._parsed: tuple[Any, dict[str, dict[str, Any]]] = (None, {})

    @property
    def _membership(self) -> Any:
        """The cluster's membership (it keeps the group settings of a cluster), else None."""
        replicas = self.broker.replicas
        return replicas.membership if replicas is not None else None

    # -- reading ----------------------------------------------------------------------

    @property
    def overrides(self) -> dict[str, dict[str, Any]]:
        """group id -> its own typed settings: the cluster's (ZooKeeper's ``/config/groups``),
        or, alone, this broker's (read from the storage at first use)."""
        membership = self._membership
        if membership is not None:
            stored = membership.group_configs()
            if self._parsed[0] is not stored:  # parsed once per change, not per call
                self._parsed = (stored, self._parse(stored))
            return self._parsed[1]
        if self._overrides is None:
            self._overrides = self._load()
        return self._overrides

    @staticmethod
    def _parse(stored: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
        out = {}
        for group, values in stored.items():
            try:
                out[group] = {n: GROUP_CONFIGS[n].parse(v) for n, v in values.items() if n in GROUP_CONFIGS}
            except ConfigError as exc:  # written by another release: that group keeps the defaults
                log.warning("the settings of group %s cannot be used: %s", group, exc)
        return out

    def _load(self) -> dict[str, dict[str, Any]]:
        text = self.broker.storage.read_state(STORE) if self.broker.storage is not None else None
        if not text:
            return {}
        try:
            stored = json.loads(text)
            return {g: {n: GROUP_CONFIGS[n].parse(v) for n, v in values.items()} for g, values in stored.items()}
        except (ValueError, AttributeError, KeyError, ConfigError) as exc:
            raise ConfigError(f"the stored group settings ({STORE}) cannot be used: {exc}") from None

    def broker_default(self, name: str) -> Any:
        d = GROUP_CONFIGS[name]
        if d.synonym is None:
            return d.default
        return self.broker.config.get(d.synonym, _BROKER_DEFAULTS[d.synonym])

    def typed(self, group_id: str, name: str) -> Any:
        """The group's value of ``name`` (typed): its own, else the broker's default."""
        own = self.overrides.get(group_id, {})
        return own[name] if name in own else self.broker_default(name)

    def value(self, group_id: str, name: str) -> str:
        """The group's value of ``name`` as Kafka's string: its own, else the broker's default
        (``share.X`` -> ``group.share.X``). KeyError for a name that is not a group setting."""
        return format_value(self.typed(group_id, name))

    def own(self, group_id: str) -> dict[str, str]:
        """The group's own settings, as strings."""
        return {n: format_value(v) for n, v in self.overrides.get(group_id, {}).items()}

    def source(self, group_id: str, name: str) -> ConfigSource | int:
        if name in self.overrides.get(group_id, {}):
            return GROUP_CONFIG_SOURCE
        d = GROUP_CONFIGS[name]
        return self.broker.config.source(d.synonym) if d.synonym in self.broker.config else ConfigSource.DEFAULT_CONFIG

    # -- changing ---------------------------------------------------------------------

    def check(self, settings: Mapping[str, str]) -> dict[str, Any]:
        """Typed ``settings`` after Kafka's checks (GroupConfig.validate); BrokkrError
        INVALID_CONFIG otherwise."""
        typed = {}
        for name, raw in settings.items():
            d = GROUP_CONFIGS.get(name)
            if d is None:
                raise BrokkrError(f"Unknown group config name: {name}", ErrorCode.INVALID_CONFIG)
            try:
                typed[name] = d.parse(raw)
            except ConfigError as exc:
                raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        config = self.broker.config
        for name, (low, high) in _BOUNDS.items():
            if name in typed:
                low_name, high_name = _bound_names(name)
                low, high = config.get(low_name, low), config.get(high_name, high)
                if not low <= typed[name] <= high:
                    raise BrokkrError(
                        f"{name} must be in the range {low} to {high} inclusive.", ErrorCode.INVALID_CONFIG
                    )
        for session, heartbeat in _SESSION_HEARTBEAT:
            if session in typed or heartbeat in typed:
                s = typed.get(session, self.broker_default(session))
                h = typed.get(heartbeat, self.broker_default(heartbeat))
                if s <= h:
                    raise BrokkrError(f"{session} must be greater than {heartbeat}", ErrorCode.INVALID_CONFIG)
        return typed

    async def alter(self, group_id: str, settings: Mapping[str, str], validate_only: bool = False) -> None:
        """Make ``settings`` (Kafka's strings) the group's own, for good (on a cluster: for
        every broker). BrokkrError INVALID_CONFIG (nothing changes) for an unknown name or a
        value out of bounds."""
        if not group_id:
            raise BrokkrError("Group name must not be empty", ErrorCode.INVALID_REQUEST)
        typed = self.check(settings)
        if validate_only:
            return
        membership = self._membership
        if membership is not None:
            await membership.set_group_configs(group_id, {n: format_value(v) for n, v in typed.items()})
        else:
            if typed:
                self.overrides[group_id] = typed
            else:
                self.overrides.pop(group_id, None)
            self._save()
        log.info("settings of group %s: %s", group_id, self.own(group_id))

    def _save(self) -> None:
        stored = {g: {n: format_value(v) for n, v in values.items()} for g, values in self.overrides.items()}
        self.broker.storage.write_state(STORE, json.dumps(stored, sort_keys=True))
