"""The consumer group protocol on a running coordinator: it runs the operations of
:class:`~.consumer_protocol.ConsumerProtocol` against the coordinator's groups, writes
their records through :meth:`GroupCoordinator.write` (which replays them once they are
acknowledged, the replay that also loads a partition), and answers only then; it fires
the members' timers; and it shows the operations the broker's topics.

Operations on one group are serialized by a lock per group: each reads the state the
previous one's records left (Kafka's coordinator runtime runs one operation at a time per
partition, with the same effect).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

import attrs
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode

from ..coordinator_partitions import write_error
from .consumer_config import consumer_settings
from .consumer_group import ConsumerGroup, GroupApiError
from .consumer_heartbeat import validate
from .consumer_protocol import ConsumerProtocol, HeartbeatResult
from .consumer_timers import SESSION, Expiry

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("brokkr.groups")

#: How often the timers are looked at, at most (s); how soon a timer whose write failed
#: fires again (ms), as Kafka's CoordinatorTimer retries.
TICK_S = 0.2
RETRY_MS = 500


def now_ms() -> int:
    return int(time.time() * 1000)


class BrokerTopics:
    """The broker's topics as the operations look at them (a TopicsView)."""

    def __init__(self, broker):
        self.broker = broker

    @property
    def version(self) -> int:
        """Changes when a topic is created or deleted (computed only for regexes)."""
        return hash(frozenset(self.broker.topics))

    def lookup(self, name: str) -> tuple[Any, int] | None:
        topic = self.broker.topics.get(name)
        return None if topic is None else (topic.topic_id, len(topic.partitions))

    def names(self) -> list[str]:
        return list(self.broker.topics)


class ConsumerCoordinator:
    """The consumer groups of one :class:`GroupCoordinator`."""

    def __init__(self, coordinator: GroupCoordinator):
        self.coordinator = coordinator
        self.protocol = ConsumerProtocol(consumer_settings(coordinator.broker.config), self._group_settings)
        self.topics = BrokerTopics(coordinator.broker)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def start(self) -> None:
        self.coordinator.spawn(self._run_timers(), "consumer group timers")

    def _group_settings(self, group_id: str):
        """The group's session timeout and heartbeat interval: its own GROUP configs, else the broker's."""
        configs = self.coordinator.broker.group_configs
        return attrs.evolve(
            self.protocol.settings,
            session_timeout_ms=configs.typed(group_id, "consumer.session.timeout.ms"),
            heartbeat_interval_ms=configs.typed(group_id, "consumer.heartbeat.interval.ms"),
        )

    def lock(self, group_id: str) -> asyncio.Lock:
        """The lock that serializes the operations on one group."""
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        return lock

    # -- ConsumerGroupHeartbeat -------------------------------------------------------

    async def heartbeat(self, ctx, request) -> tuple[ErrorCode, str | None, HeartbeatResult | None]:
        """Run one heartbeat: (error, message, result); the result only without error."""
        broker = self.coordinator.broker

        def describable(names: list[str]) -> set[str]:
            allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, names)
            return {n for n, ok in allowed.items() if ok}

        group_id = request.group_id
        try:  # Kafka validates the request before it looks for the group's coordinator
            validate(request, ctx.api_version, self.protocol.settings.assignors)
        except GroupApiError as exc:
            return exc.code, exc.message, None
        async with self.lock(group_id):
            error = self.coordinator.check_coordinator(group_id)
            if error:
                return error, None, None
            try:
                records, result = self.protocol.heartbeat(
                    self.coordinator.groups,
                    request,
                    now_ms=now_ms(),
                    topics=self.topics,
                    api_version=ctx.api_version,
                    client_id=ctx.client_id or "",
                    client_host=f"/{ctx.client_host}",
                    describable=describable,
                )
            except GroupApiError as exc:
                return exc.code, exc.message, None
            if records:
                error = await self.coordinator.write(group_id, records)
                if error:
                    return write_error(error), None, None
            return ErrorCode.NONE, None, result

    # -- timers and loading -----------------------------------------------------------

    async def _run_timers(self) -> None:
        await run_timers(self.protocol.timers, self._expire, "group")

    async def _expire(self, expiry: Expiry) -> None:
        async with self.lock(expiry.group_id):
            if self.coordinator.check_coordinator(expiry.group_id):
                return
            records = self.protocol.expire(self.coordinator.groups, expiry, self.topics, now_ms())
            if not records:
                return
            error = await self.coordinator.write(expiry.group_id, records)
            if error and expiry.kind == SESSION:
                log.warning("fencing member %s of group %s failed: %s", expiry.member_id, expiry.group_id, error.name)
                timers = self.protocol.timers
                if timers.deadline(SESSION, expiry.group_id, expiry.member_id) is None:
                    timers.schedule(SESSION, expiry.group_id, expiry.member_id, now_ms() + RETRY_MS)

    def loaded(self, group: ConsumerGroup) -> None:
        """A group loaded from its partition: its members' sessions start now."""
        self.protocol.loaded(group, now_ms())

    def unloaded(self, group_id: str) -> None:
        self.protocol.unloaded(group_id)


async def run_timers(timers, expire, kind: str) -> None:
    """Fire ``timers``' due expiries through ``expire``, every :data:`TICK_S`, for ever (also
    the share groups' timers; ``kind`` names the groups in the log)."""
    while True:
        await asyncio.sleep(TICK_S)
        for expiry in timers.due(now_ms()):
            try:
                await expire(expiry)
            except Exception:  # one failed expiry must not stop the timers of all groups
                log.exception("expiring member %s of %s %s failed", expiry.member_id, kind, expiry.group_id)
