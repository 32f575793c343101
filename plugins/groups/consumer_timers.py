"""The deadlines of consumer group members (the session and rebalance timers of Kafka's
CoordinatorTimer), kept as plain numbers so that tests drive them with fake time.

A member's *session* deadline moves forward with each of its heartbeats; when it passes,
the member is fenced (removed). Its *rebalance* deadline is set when it must revoke
partitions: if it is still in the same epoch when it passes, it is fenced too. Deadlines
are soft state (not in records): a partition that loads schedules them afresh, and a timer
that fires for a member that has moved on does nothing.
"""

from __future__ import annotations

import heapq
import itertools

import attrs

SESSION = "session"
REBALANCE = "rebalance"


@attrs.frozen
class Expiry:
    kind: str
    group_id: str
    member_id: str
    #: For a rebalance timer: the member epoch it was set in.
    epoch: int | None = None


class MemberTimers:
    """Deadlines by (kind, group, member); a later schedule replaces an earlier one."""

    def __init__(self) -> None:
        self._deadlines: dict[tuple[str, str, str], tuple[int, int | None, int]] = {}
        self._heap: list[tuple[int, int, tuple[str, str, str]]] = []
        self._seq = itertools.count()

    def schedule(self, kind: str, group_id: str, member_id: str, deadline_ms: int, epoch: int | None = None) -> None:
        seq = next(self._seq)
        key = (kind, group_id, member_id)
        self._deadlines[key] = (deadline_ms, epoch, seq)
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, kind: str, group_id: str, member_id: str) -> None:
        self._deadlines.pop((kind, group_id, member_id), None)

    def cancel_member(self, group_id: str, member_id: str) -> None:
        for kind in (SESSION, REBALANCE):
            self.cancel(kind, group_id, member_id)

    def cancel_group(self, group_id: str) -> None:
        for key in [k for k in self._deadlines if k[1] == group_id]:
            del self._deadlines[key]

    def deadline(self, kind: str, group_id: str, member_id: str) -> int | None:
        entry = self._deadlines.get((kind, group_id, member_id))
        return None if entry is None else entry[0]

    def next_deadline(self) -> int | None:
        """The earliest live deadline (stale heap entries are dropped on the way)."""
        while self._heap:
            deadline, seq, key = self._heap[0]
            entry = self._deadlines.get(key)
            if entry is not None and entry[2] == seq:
                return deadline
            heapq.heappop(self._heap)
        return None

    def due(self, now_ms: int) -> list[Expiry]:
        """The timers whose deadline has passed at ``now_ms``, removed, earliest first."""
        out = []
        while (deadline := self.next_deadline()) is not None and deadline <= now_ms:
            _, _, key = heapq.heappop(self._heap)
            _, epoch, _ = self._deadlines.pop(key)
            out.append(Expiry(key[0], key[1], key[2], epoch))
        return out
