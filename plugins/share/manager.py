"""The share partitions and share sessions of one broker (Kafka's SharePartitionManager and
ShareSessionCache), registered as a plugin object of the broker it serves.

A share session is keyed by (group, member): ShareFetch with epoch 0 opens it (replacing the
member's old one) with the partitions it names, up to ``group.share.max.share.sessions``
sessions (then SHARE_SESSION_LIMIT_REACHED); each later request must carry the session's
epoch (else INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND), which then
moves on by one (after 2^31-1 back to 1), adding the partitions it names and removing the
ones it forgets; epoch -1 closes it, releasing the records the member holds there. When the
sessions are at their limit, those unused for longer than their group's
``share.session.timeout.ms`` are closed to make room; the group coordinator closes a removed
member's (:meth:`ShareManager.member_left`), and a session closes with the connection that
opened it (``brokkr_connection_closed``), its member's records released at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from brokkr.core.errors import ErrorCode

from .partition import SharePartition, group_setting

log = logging.getLogger("brokkr.share")

PLUGIN_NAME = "brokkr.share.partitions"
INITIAL_EPOCH, FINAL_EPOCH = 0, -1

TopicPartition = tuple[uuid.UUID, int]


class SessionError(Exception):
    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


class ShareSession:
    __slots__ = ("group_id", "member_id", "connection_id", "epoch", "partitions", "last_used")

    def __init__(self, group_id: str, member_id: str, connection_id: str | None = None):
        self.group_id, self.member_id = group_id, member_id
        #: The connection that opened it: when it closes, so does the session.
        self.connection_id = connection_id
        self.epoch = 1
        self.last_used = time.monotonic()
        #: The session's partitions, in the order they were added.
        self.partitions: dict[TopicPartition, None] = {}


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareManager:
    def __init__(self, broker):
        self.broker = broker
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._tasks: set[asyncio.Task] = set()

    # -- share partitions -------------------------------------------------------------------

    def share_partition(self, group_id: str, partition) -> SharePartition:
        """The share partition of ``group_id`` on ``partition`` (which this broker leads),
        made anew when the partition's leader epoch moved since."""
        sp = self.existing(group_id, partition)
        if sp is None:
            sp = self.partitions[(group_id, partition.topic.topic_id, partition.index)] = SharePartition(
                self, group_id, partition
            )
        return sp

    def existing(self, group_id: str, partition) -> SharePartition | None:
        """The share partition of ``group_id`` on ``partition`` if a fetch made it and the
        partition's leader epoch has not moved since (acknowledgements never make one)."""
        sp = self.partitions.get((group_id, partition.topic.topic_id, partition.index))
        if sp is not None and (sp.leader_epoch != partition.leader_epoch or sp.partition is not partition):
            self.drop(sp)
            sp = None
        return sp

    def drop(self, sp: SharePartition) -> None:
        if self.partitions.get(sp.key) is sp:
            del self.partitions[sp.key]
        sp.close()

    def drop_partition(self, partition) -> None:
        """This broker no longer leads ``partition`` (or it was deleted): its share partitions go."""
        for sp in [sp for sp in self.partitions.values() if sp.partition is partition]:
            self.drop(sp)

    def reset(self, group_id: str, topic_id: uuid.UUID, index: int) -> None:
        """The share partition's state was initialized again (AlterShareGroupOffsets): reload it."""
        sp = self.partitions.get((group_id, topic_id, index))
        if sp is not None:
            self.drop(sp)

    # -- share sessions ---------------------------------------------------------------------

    def session_for(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        fetch: list[TopicPartition],
        forget: list[TopicPartition],
        has_acks: bool,
        connection_id: str | None = None,
    ) -> ShareSession:
        """The request's session (Kafka's SharePartitionManager.newContext), opened, checked
        or moved on; SessionError with Kafka's error otherwise."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
            return session
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise SessionError(ErrorCode.INVALID_REQUEST)
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.broker.config["group.share.max.share.sessions"]:
                self._evict_idle()
            if len(self.sessions) >= self.broker.config["group.share.max.share.sessions"]:
                raise SessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, connection_id)
            session.partitions.update(dict.fromkeys(fetch))
            return session
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if session.epoch != epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.last_used = time.monotonic()
        session.partitions.update(dict.fromkeys(fetch))
        for tp in forget:
            session.partitions.pop(tp, None)
        session.epoch = next_epoch(session.epoch)
        return session

    def acknowledge_session(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """ShareAcknowledge's session check: it never opens one."""
        if epoch == INITIAL_EPOCH:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch != FINAL_EPOCH:
            if session.epoch != epoch:
                raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
            session.epoch = next_epoch(session.epoch)
            session.last_used = time.monotonic()
        return session

    def _evict_idle(self) -> None:
        """Make room: close the sessions unused for longer than their group's
        share.session.timeout.ms (a consumer that crashed, or fetches elsewhere now; the group
        coordinator has removed such a member meanwhile). A live consumer whose session went
        is answered SHARE_SESSION_NOT_FOUND and opens a new one."""
        now = time.monotonic()
        for session in list(self.sessions.values()):
            timeout_ms = group_setting(self.broker, session.group_id, "share.session.timeout.ms")
            if now - session.last_used > timeout_ms / 1000:
                self.close_session(session)

    def close_session(self, session: ShareSession) -> None:
        """Epoch -1: the session goes and its member's records are released (and written)."""
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]
        self.release_member(session.group_id, session.member_id)

    def connection_closed(self, connection_id: str) -> None:
        """The connection that opened these sessions closed (the consumer went away): they
        close, their members' records available again at once (Kafka 4.1+)."""
        for session in [s for s in self.sessions.values() if s.connection_id == connection_id]:
            self.close_session(session)

    def member_left(self, group_id: str, member_id: str) -> None:
        """The group coordinator removed the member (it left, or its session timed out):
        its share session goes and its records are released (Kafka's ShareGroupListener)."""
        session = self.sessions.pop((group_id, member_id), None)
        if session is not None or any(sp.group_id == group_id for sp in self.partitions.values()):
            self.release_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member left (its session closed, or the group coordinator removed it): its
        acquired records become available to the others."""
        for sp in list(self.partitions.values()):
            if sp.group_id == group_id and sp.release_member(member_id):
                sp.persist_soon()

    # -- lifecycle --------------------------------------------------------------------------

    def spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"brokkr-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def stop(self) -> None:
        for sp in list(self.partitions.values()):
            self.drop(sp)
        self.sessions.clear()
        for task in list(self._tasks):
            task.cancel()
