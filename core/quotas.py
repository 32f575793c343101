"""Client quota vocabulary with Kafka's names: entities, quota keys, the store.

A quota *entity* is what a quota setting applies to, Kafka's ``ClientQuotaEntity``: a user,
a client id, or a user and a client id, each either named or the default
(``<default>``, ``None`` here). It is kept as a tuple of ``(entity type, name)`` pairs
sorted by type, so ``(("client-id", None), ("user", "alice"))`` is
``/config/users/alice/clients/<default>``.

AlterClientQuotas and DescribeClientQuotas (``core/apis/``) validate and filter entities
and keys; the ``brokkr_client_quota_store`` hook provides the :class:`ClientQuotaStore`
that keeps them, and the plugin behind it enforces them through ``brokkr_quota_throttle_ms``.
"""

from __future__ import annotations

import time
import types
from collections.abc import Awaitable
from typing import Protocol

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"

#: The keys brokkr enforces for user and client-id entities, with Kafka's types: the
#: byte rates are whole bytes per second (LONG), request_percentage a DOUBLE (percent of
#: one thread). Kafka's controller_mutation_rate and the ip entity's
#: connection_creation_rate are refused: brokkr does not enforce them.
QUOTA_KEYS: dict[str, type] = {PRODUCER_BYTE_RATE: int, CONSUMER_BYTE_RATE: int, REQUEST_PERCENTAGE: float}

#: ``brokkr_quota_throttle_ms``'s quota types and the key that bounds each.
KEY_OF_QUOTA_TYPE = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE, "request": REQUEST_PERCENTAGE}

QuotaEntity = tuple[tuple[str, "str | None"], ...]


def quota_entity(pairs) -> QuotaEntity:
    """The canonical form of ``(entity type, name)`` pairs (sorted by type)."""
    return tuple(sorted(pairs))


def entity_path(entity: QuotaEntity) -> str:
    """Kafka's path-like name of an entity, for messages: ``users/alice/clients/<default>``."""
    names = dict(entity)
    parts = []
    for kind, label in ((USER, "users"), (CLIENT_ID, "clients"), (IP, "ips")):
        if kind in names:
            parts.append(f"{label}/{'<default>' if names[kind] is None else names[kind]}")
    return "/".join(parts)


class ClientQuotaStore(Protocol):
    """Quota settings per entity, as AlterClientQuotas leaves them (Kafka keeps them in its
    metadata log). Entities and keys arrive validated."""

    def quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with at least one setting, and its settings."""

    def alter(self, changes: dict[QuotaEntity, dict[str, float | None]]) -> Awaitable[None] | None:
        """Set each key to its value, or remove it where the value is None; an entity left
        with no key is dropped. Persist before returning, or before the awaitable returned is
        done (the built-in store's, which keeps the settings for the whole cluster:
        ``core/shared_documents.py``; AlterClientQuotas awaits it); the new settings apply to
        the next request."""


class BusyTime:
    """Runs a coroutine and adds to ``seconds`` the time its steps take on the event loop,
    its waits excluded: the request time that ``request_percentage`` quotas count (Kafka
    counts handler-thread time, never time a request spends in the purgatory), so a fetch
    long-poll or an acks=-1 produce costs what its code runs, not how long it waited."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    def first_step(self, coro):
        """Run ``coro``'s first step, counted: ``(True, its result)`` when it finished there
        (most requests: answered without waiting, with no generator between the handler
        and the loop), else ``(False, an awaitable)`` that runs the rest as :meth:`run`
        would have, counted alike. An exception of the first step propagates."""
        clock = time.perf_counter
        start = clock()
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return True, stop.value
        finally:
            self.seconds += clock() - start
        return False, self._rest(coro, yielded)

    @types.coroutine
    def run(self, coro):
        finished, rest = self.first_step(coro)
        if finished:
            return rest
        return (yield from rest)

    @types.coroutine
    def _rest(self, coro, yielded):
        clock = time.perf_counter
        while True:
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation, or the awaited future's error: deliver it
                value, error = None, exc
            # Past their use, this frame holds neither the future waited on nor the exception
            # thrown in: an exception raised through here has this frame in its traceback, and
            # the cycle would keep every frame of it (a record walk's buffers) until the rare
            # collections of ``brokkr serve`` (core/cli.py).
            yielded = None
            start = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.seconds += clock() - start
                error = None
