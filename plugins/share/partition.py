"""A share partition (Kafka's SharePartition): what one share group has delivered of one
topic partition, kept by that partition's leader.

Offsets below ``start`` are done (acknowledged or archived). Records in ``[start, end)``
are in flight, each with its state (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED) and
delivery count in ``records``; an offset there without an entry holds nothing to deliver (a
transaction marker, an aborted transaction's record for read_committed). Records from
``end`` on have never been delivered. A fetch acquires the AVAILABLE records first, then
new ones from ``end``, while ``end - start`` stays under
``share.partition.max.record.locks`` (batch_optimized, a batch the cap falls inside is
acquired to its end, as Kafka's; so memory is bounded by the cap, plus one batch). A
batch_optimized fetch's acquired ranges are split by its BatchSize where batches start
(Kafka's createBatches). Acquired records are locked to their member for
``share.record.lock.duration.ms``: one timer per acquisition, which on expiry makes its
records that are still acquired AVAILABLE again, or ARCHIVED once delivered
``share.delivery.count.limit`` times, as a release does. From half that limit on, a batch's
records are delivered again in ever smaller runs, a record's last delivery alone (Kafka
4.2's throttled delivery): one record its consumers keep failing on is archived without the
rest of its batch. ``start`` moves over the acknowledged and archived prefix; when the
log's start passes it (retention, DeleteRecords) the records below are dropped, and
acknowledgements of offsets below ``start`` are skipped, as Kafka's.

State is loaded from the share coordinator when the share partition is first used (a state
without a start offset starts where ``share.auto.offset.reset`` says; offsets between its
start and its last batch that no batch covers, as a Kafka broker's writes of what changed
leave them, are delivered as new: Kafka's read gap window) and written back, the
whole in-flight window as state batches (acquired records as AVAILABLE with their count),
before an acknowledgement is answered and after locks expire. Writes leave one at a time,
in the order they were made; a background write (locks running out, a member leaving) not
yet started covers every later change, so they queue one write at most. An acknowledgement
whose write fails (the share coordinator unreachable or moving, a timeout) is rolled back:
its records are acquired by their member again, under their lock, and the member is
answered the error. Records it releases are RELEASING until the write succeeds: no fetch
acquires them before (Kafka holds records in a state transition). A write answered
FENCED_STATE_EPOCH (the group's offsets were reset) or FENCED_LEADER_EPOCH drops the share
partition; its next use loads it again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator

from brokkr.core.errors import ErrorCode
from brokkr.core.log import OffsetOutOfRange
from brokkr.core.protocol.records import iter_batches_untrusted, next_offset_after

from .records import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, StateBatch

log = logging.getLogger("brokkr.share")

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
#: A record released by an acknowledgement whose write is under way (in memory only, written
#: as AVAILABLE): no fetch acquires it until the write succeeds (Kafka's ongoing state transition).
RELEASING = -1
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
#: The most in-flight offsets a loaded state may describe (group.share.max.partition.max.record.locks
#: at its highest, twice): anything beyond is delivered again rather than held in memory.
MAX_LOADED_WINDOW = 20000
#: The first read of a fetch; each further read doubles, up to the fetch's MaxBytes.
READ_CHUNK_BYTES = 64 * 1024
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def group_setting(broker, group_id: str, name: str):
    """A share setting of ``group_id`` (typed): its own value, else the broker's
    (``broker.group_configs``, :mod:`brokkr.core.group_configs`); without it, the broker's
    ``group.<name>`` or Kafka's default."""
    configs = getattr(broker, "group_configs", None)
    if configs is not None:
        return configs.typed(group_id, name)
    defaults = {"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}
    if name in defaults:
        return defaults[name]
    if name == "share.renew.acknowledge.enable":
        return True
    return broker.config["group." + name]


def parse_duration_ms(text: str) -> int | None:
    """An ISO-8601 duration such as ``P1DT2H`` in ms (None when it is not one)."""
    m = _DURATION.match(text.strip().upper())
    if m is None or not any(m.groups()):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


class Record:
    __slots__ = ("state", "count", "lock")

    def __init__(self, state: int, count: int, lock: Acquisition | None = None):
        self.state, self.count, self.lock = state, count, lock


class Acquisition:
    """Records acquired together by one member, under one lock timer."""

    __slots__ = ("member", "offsets", "held", "timer")

    def __init__(self, member: str, offsets: list[int]):
        self.member, self.offsets, self.timer = member, offsets, None
        self.held = len(offsets)  # of its records, how many it still locks


class Undo:
    """What an acknowledgement changed, to undo it when its write fails: per offset, the
    record, the state it was given and the lock it had."""

    __slots__ = ("changed",)

    def __init__(self):
        self.changed: list[tuple[int, Record, int, Acquisition]] = []


class _Taken:
    """What one acquisition has taken so far, and its bounds."""

    __slots__ = (
        "member",
        "max_records",
        "mode",
        "limit",
        "max_locks",
        "deliveries",
        "kept",
        "offsets",
        "counts",
        "starts",
        "full",
    )

    def __init__(self, member: str, max_records: int, mode: int, limit: int, max_locks: int, deliveries: int):
        self.member, self.max_records, self.mode, self.limit, self.max_locks = (
            member,
            max_records,
            mode,
            limit,
            max_locks,
        )
        self.deliveries = deliveries  # share.delivery.count.limit
        self.kept: list[memoryview] = []  # the batches holding acquired records
        self.offsets: list[int] = []
        self.counts: list[int] = []
        self.starts: set[int] = set()  # of each batch in ``kept``, the first offset acquired
        self.full = False  # nothing more may be acquired (the limit, the in-flight cap, record_limit)


class SharePartition:
    def __init__(self, manager, group_id: str, partition):
        self.manager = manager
        self.broker = manager.broker
        self.group_id = group_id
        self.partition = partition
        self.topic_id = partition.topic.topic_id
        self.key = (group_id, self.topic_id, partition.index)
        #: What a delayed ShareFetch watches for records becoming available here.
        self.wake_key = ("share", group_id, self.topic_id, partition.index)
        self.leader_epoch = partition.leader_epoch
        self.state_epoch = 0
        self.start = self.end = 0
        self.records: dict[int, Record] = {}
        self.available = 0  # AVAILABLE entries of ``records``
        self.dropped = False
        self._loading: asyncio.Task | None = None
        self._writes = asyncio.Lock()
        self._write_due = False  # a background write waits for its turn (persist_soon)

    # -- settings --------------------------------------------------------------------------

    def setting(self, name: str):
        return group_setting(self.broker, self.group_id, name)

    @property
    def lock_ms(self) -> int:
        return self.setting("share.record.lock.duration.ms")

    # -- loading ----------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """Whether its state has loaded (and it is still in use)."""
        return self._loading is not None and self._loading.done() and not self.dropped

    async def ready(self) -> ErrorCode:
        """Load the state once (concurrent callers share the load); the load's error, if any."""
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load(), name=f"brokkr-share-load {self.key}")
        return await asyncio.shield(self._loading)

    async def _load(self) -> ErrorCode:
        try:
            return await self._read_state()
        except Exception:
            log.exception("share partition %s could not load its state", self.key)
            self.manager.drop(self)
            return ErrorCode.UNKNOWN_SERVER_ERROR

    async def _read_state(self) -> ErrorCode:
        persister = self.broker.share_state
        group, topic_id, index = self.key
        error, state_epoch, start, batches = await persister.read_state(group, topic_id, index, self.leader_epoch)
        if error == ErrorCode.INVALID_REQUEST:  # never initialized (the group coordinator has not yet): do it now
            error = await persister.initialize(group, topic_id, index, -1, 0, reload_live=False)
            if not error or error == ErrorCode.FENCED_STATE_EPOCH:
                error, state_epoch, start, batches = await persister.read_state(
                    group, topic_id, index, self.leader_epoch
                )
        if error:
            log.info("share partition %s could not load its state: %s", self.key, error.name)
            self.manager.drop(self)
            return error
        self.state_epoch = state_epoch
        log_start = self.partition.log.log_start_offset
        reset = start < 0
        if reset:
            start = self._reset_offset()
        self.start = self.end = max(start, log_start)
        limit = self.start + MAX_LOADED_WINDOW
        for b in batches:
            for offset in range(max(b.first_offset, self.start), min(b.last_offset + 1, limit)):
                if b.delivery_state == AVAILABLE:
                    self.records[offset] = Record(AVAILABLE, b.delivery_count)
                    self.available += 1
                else:
                    self.records[offset] = Record(
                        ARCHIVED if b.delivery_state == ARCHIVED else ACKNOWLEDGED, b.delivery_count
                    )
                self.end = max(self.end, offset + 1)
        for offset in range(self.start, self.end):  # Kafka's read gap window: never delivered
            if offset not in self.records:
                self.records[offset] = Record(AVAILABLE, 0)
                self.available += 1
        self._advance_start()
        if reset:  # where share.auto.offset.reset put it, kept: a restart must not move it
            error = await self.persist()
            if self.dropped:
                return error
        return ErrorCode.NONE

    def _reset_offset(self) -> int:
        """Where a share partition without state starts (share.auto.offset.reset)."""
        reset = str(self.setting("share.auto.offset.reset")).strip().lower()
        if reset == "earliest":
            return self.partition.log.log_start_offset
        if reset.startswith("by_duration:"):
            ms = parse_duration_ms(reset.split(":", 1)[1])
            if ms is not None:
                found = self.partition.log.offset_for_timestamp(int(time.time() * 1000) - ms)
                return found.offset if found is not None else self.partition.high_watermark
        return self.partition.high_watermark

    # -- reading ----------------------------------------------------------------------------

    @property
    def read_committed(self) -> bool:
        return str(self.setting("share.isolation.level")).strip().lower() == "read_committed"

    def _limit(self) -> int:
        """The offset deliveries stop before: the high watermark, or for read_committed the last stable offset."""
        return self.partition.last_stable_offset if self.read_committed else self.partition.high_watermark

    def acquirable(self) -> bool:
        """Whether a fetch would acquire something now."""
        if not self.loaded:
            return False
        if self.available:
            return True
        return self.end < self._limit() and self.end - self.start < self.setting("share.partition.max.record.locks")

    def _first_available(self) -> int | None:
        if not self.available:
            return None
        for offset in range(self.start, self.end):
            rec = self.records.get(offset)
            if rec is not None and rec.state == AVAILABLE:
                return offset
        return None

    def acquire(
        self, member: str, max_records: int, mode: int, max_bytes: int, batch_size: int = 0
    ) -> tuple[bytes, list[tuple[int, int, int]], int]:
        """Acquire up to ``max_records`` records for ``member`` (batch_optimized: whole
        batches, which may pass it), reading the log in chunks from 64 KiB up to
        ``max_bytes`` (so that a fetch of a few records reads little): the batches holding
        them, the acquired ranges (first, last, delivery count), and how many were acquired.
        batch_optimized, a range holding more than ``batch_size`` records is split where a
        batch starts once it holds ``batch_size`` (Kafka's createBatches; 0 or less: never)."""
        if max_records <= 0 or self.dropped:
            return b"", [], 0
        limit = self._limit()
        max_locks = self.setting("share.partition.max.record.locks")
        if self.start < self.partition.log.log_start_offset:  # retention or DeleteRecords moved the log's start
            self._skip_to(self.partition.log.log_start_offset)
        first = self._first_available()
        if first is None:
            if self.end >= limit or self.end - self.start >= max_locks:
                return b"", [], 0
            first = self.end
        took = _Taken(member, max_records, mode, limit, max_locks, self.setting("share.delivery.count.limit"))
        position, budget, chunk = first, max(max_bytes, 1), READ_CHUNK_BYTES
        while budget > 0 and not took.full and len(took.offsets) < max_records:
            try:
                data = self.partition.log.read(position, min(chunk, budget), max(limit, position), True)
            except OffsetOutOfRange:
                break
            if not data:
                break
            if position == first:
                header = next(iter_batches_untrusted(data), None)
                if header is not None and header.base_offset > first and first < self.end:
                    self._archive_missing(first, header.base_offset)  # gone from the log (compaction)
            self._take(data, position, took)
            after = next_offset_after(data, position)
            if after <= position:
                break
            budget -= len(data)
            position, chunk = after, chunk * 2
        if not took.offsets:
            self._advance_start()
            return b"", [], 0
        acquisition = Acquisition(member, took.offsets)
        for offset in took.offsets:
            self.records[offset].lock = acquisition
        acquisition.timer = asyncio.get_running_loop().call_later(self.lock_ms / 1000, self._expire, acquisition)
        split = batch_size if mode == BATCH_OPTIMIZED else 0
        return b"".join(took.kept), _ranges(took.offsets, took.counts, took.starts, split), len(took.offsets)

    def _take(self, data: bytes, first: int, took: _Taken) -> None:
        """Acquire what ``data`` (batches read from ``first``) holds for ``took``."""
        aborted = self._aborted(first, data) if self.read_committed else None
        view = memoryview(data)
        records = self.records
        for header in iter_batches_untrusted(data):
            if took.full or len(took.offsets) >= took.max_records:
                return
            if header.last_offset < first:
                continue
            skip = header.is_control or (aborted is not None and self._is_aborted(header, aborted))
            throttled = header.base_offset < self.end and self._throttled(header, first, took.deliveries)
            if throttled and took.offsets:
                took.full = True  # its records go apart, in a later fetch
                return
            acquired, cap, began = 0, None, False
            # batch_optimized: a batch begun goes on past the in-flight cap to its end (Kafka's
            # acquireNewBatchRecords), so the cap is passed by one batch at most
            whole = took.mode == BATCH_OPTIMIZED
            for offset in range(max(header.base_offset, first), header.last_offset + 1):
                if offset < self.end:
                    rec = records.get(offset)
                    if rec is None or rec.state != AVAILABLE:
                        continue
                    if skip:  # a gap of the loaded state holding a marker, an aborted record
                        rec.state = ARCHIVED
                        self.available -= 1
                        continue
                    if throttled:
                        if took.deliveries > 2 and rec.count == took.deliveries - 1 and acquired:
                            took.full = True  # its last delivery: alone, next time
                            break
                        if cap is None and rec.count >= _throttle_from(took.deliveries):
                            cap = _throttled_records(header, rec.count, took.deliveries)
                    self.available -= 1
                else:  # the in-flight cap counts markers and aborted records too, as Kafka's
                    if offset >= took.limit or (
                        self.end - self.start >= took.max_locks and not (whole and (acquired or began))
                    ):
                        took.full = True
                        break
                    self.end = offset + 1
                    began = True
                    if skip:
                        continue
                    rec = records[offset] = Record(AVAILABLE, 0)
                rec.state = ACQUIRED
                rec.count += 1
                took.offsets.append(offset)
                took.counts.append(rec.count)
                acquired += 1
                if took.mode == RECORD_LIMIT and len(took.offsets) >= took.max_records:
                    took.full = True
                    break
                if throttled and ((took.deliveries > 2 and rec.count == took.deliveries) or (cap and acquired >= cap)):
                    took.full = True
                    break
            if acquired:
                took.kept.append(view[header.position : header.end])
                took.starts.add(took.offsets[-acquired])
                took.full = took.full or throttled

    def _throttled(self, header, first: int, deliveries: int) -> bool:
        """Whether a batch being delivered again holds an available record delivered at least
        half the delivery count limit times (Kafka's shouldThrottleRecordsDelivery): then its
        records go in ever smaller runs, a record's last delivery alone, so that one record a
        consumer cannot process does not use up the deliveries of its whole batch."""
        records, at_least = self.records, _throttle_from(deliveries)
        for offset in range(max(header.base_offset, first, self.start), min(header.last_offset + 1, self.end)):
            rec = records.get(offset)
            if rec is not None and rec.state == AVAILABLE and rec.count >= at_least:
                return True
        return False

    def _aborted(self, first: int, data: bytes) -> dict[int, list[tuple[int, int]]]:
        """The aborted transactions over the records read, by producer id: (first offset, marker offset)."""
        found: dict[int, list[tuple[int, int]]] = {}
        for t in self.partition.aborted.aborted_txns(first, next_offset_after(data, first)):
            found.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))
        return found

    @staticmethod
    def _is_aborted(header, aborted: dict[int, list[tuple[int, int]]]) -> bool:
        if not header.is_transactional:
            return False
        return any(lo <= header.base_offset <= hi for lo, hi in aborted.get(header.producer_id, ()))

    def _archive_missing(self, first: int, upto: int) -> None:
        for offset in range(first, min(upto, self.end)):
            rec = self.records.get(offset)
            if rec is not None and rec.state == AVAILABLE:
                rec.state = ARCHIVED
                self.available -= 1

    def _skip_to(self, offset: int) -> None:
        """The log starts at ``offset`` now (retention, DeleteRecords): what lay below is gone."""
        for old in range(self.start, min(offset, self.end)):
            rec = self.records.pop(old, None)
            if rec is not None and rec.state == AVAILABLE:
                self.available -= 1
        self.start = max(self.start, offset)
        self.end = max(self.end, self.start)

    # -- acknowledging ----------------------------------------------------------------------

    def check_acks(self, member: str, batches) -> ErrorCode:
        """Kafka's SharePartition.acknowledge checks: offsets below ``start`` are done (acknowledged,
        archived, or gone from the log) and skipped; an offset past the in-flight records is
        INVALID_REQUEST; any other not acquired by ``member``, or acknowledged twice (batches
        sharing their edge offset), INVALID_RECORD_STATE."""
        previous = -1
        for b in batches:
            if b.first_offset <= previous:
                return ErrorCode.INVALID_RECORD_STATE
            previous = b.last_offset
            if b.last_offset < self.start:
                continue
            if self.start < self.end <= b.last_offset:
                return ErrorCode.INVALID_REQUEST  # "The last offset in request is past acquired records."
            first = max(b.first_offset, self.start)
            if b.last_offset - first + 1 > len(self.records):
                return ErrorCode.INVALID_RECORD_STATE
            for offset in range(first, b.last_offset + 1):
                rec = self.records.get(offset)
                if rec is None or rec.state != ACQUIRED or rec.lock is None or rec.lock.member != member:
                    return ErrorCode.INVALID_RECORD_STATE
        return ErrorCode.NONE

    def acknowledge(self, member: str, batches) -> tuple[ErrorCode, Undo | None]:
        """Apply acknowledgements (already checked by the API) in memory: (error, what undoes
        them). The caller then writes the state (:meth:`persist`) and, as Kafka's
        SharePartition does, :meth:`commit` once it is durable, else :meth:`rollback`."""
        if self.dropped:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        error = self.check_acks(member, batches)
        if error:
            return error, None
        if any(RENEW in b.acknowledge_types for b in batches) and not self.setting("share.renew.acknowledge.enable"):
            return ErrorCode.INVALID_RECORD_STATE, None  # "Renewing acquisition locks is not enabled for the group."
        limit = self.setting("share.delivery.count.limit")
        renewed: list[int] = []
        undo = Undo()
        for b in batches:
            types = b.acknowledge_types
            for offset in range(max(b.first_offset, self.start), b.last_offset + 1):
                kind = types[offset - b.first_offset] if len(types) > 1 else types[0]
                rec = self.records[offset]
                if kind == RENEW:
                    renewed.append(offset)
                    continue
                lock = rec.lock
                rec.lock = None  # its timer stays until commit: a rollback may need it back
                lock.held -= 1
                if kind == ACCEPT:
                    rec.state = ACKNOWLEDGED
                elif kind == RELEASE:
                    rec.state = ARCHIVED if rec.count >= limit else RELEASING
                else:  # REJECT, GAP
                    rec.state = ARCHIVED
                undo.changed.append((offset, rec, rec.state, lock))
        if renewed:
            acquisition = Acquisition(member, renewed)
            for offset in renewed:
                rec = self.records[offset]
                self._unlock(offset, rec)
                rec.lock = acquisition
            acquisition.timer = asyncio.get_running_loop().call_later(self.lock_ms / 1000, self._expire, acquisition)
        self._advance_start()
        self._wake()
        return ErrorCode.NONE, undo

    def commit(self, undo: Undo) -> None:
        """The acknowledgements are durable: the locks they emptied stop, the records they
        released become available."""
        released = False
        for offset, rec, state, lock in undo.changed:
            if not lock.held:
                lock.timer.cancel()
            if state == RELEASING and rec.state == RELEASING and self.records.get(offset) is rec:
                rec.state = AVAILABLE
                self.available += 1
                released = True
        if released:
            self._wake()

    def rollback(self, undo: Undo) -> None:
        """Their write failed: the records they changed are acquired by their member again,
        under the lock they had (its deadline kept), unless something moved them on since
        (retention removed them; the share partition was dropped). Released records were
        held from fetches meanwhile (RELEASING), so they are still there to take back."""
        loop = asyncio.get_running_loop()
        log_start = self.partition.log.log_start_offset
        for offset, rec, state, lock in undo.changed:
            if rec.state != state or rec.lock is not None or offset < log_start or self.dropped:
                continue
            if offset < self.start:  # _advance_start dropped it: the window opens again there
                self.start = offset
            self.records[offset] = rec
            rec.state, rec.lock = ACQUIRED, lock
            lock.held += 1
            if lock.timer.cancelled() or lock.timer.when() <= loop.time():  # it runs out as it would have
                lock.timer = loop.call_at(max(lock.timer.when(), loop.time()), self._expire, lock)

    @staticmethod
    def _unlock(offset: int, rec: Record) -> None:
        acquisition = rec.lock
        rec.lock = None
        if acquisition is not None:
            acquisition.held -= 1
            if not acquisition.held:
                acquisition.timer.cancel()

    def _release(self, rec: Record, limit: int) -> None:
        if rec.count >= limit:
            rec.state = ARCHIVED
        else:
            rec.state = AVAILABLE
            self.available += 1

    def release_member(self, member: str) -> bool:
        """Release every record ``member`` holds (its share session closed); whether any was."""
        limit = self.setting("share.delivery.count.limit")
        released = False
        for offset in range(self.start, self.end):
            rec = self.records.get(offset)
            if rec is not None and rec.state == ACQUIRED and rec.lock is not None and rec.lock.member == member:
                self._unlock(offset, rec)
                self._release(rec, limit)
                released = True
        if released:
            self._advance_start()
            self._wake()
        return released

    def _expire(self, acquisition: Acquisition) -> None:
        """The lock ran out: its records still acquired become available (or archived)."""
        if self.dropped:
            return
        limit = self.setting("share.delivery.count.limit")
        expired = False
        for offset in acquisition.offsets:
            rec = self.records.get(offset)
            if rec is not None and rec.state == ACQUIRED and rec.lock is acquisition:
                rec.lock = None
                self._release(rec, limit)
                expired = True
        if expired:
            self._advance_start()
            self._wake()
            self.persist_soon()

    def _advance_start(self) -> None:
        records = self.records
        while self.start < self.end:
            rec = records.get(self.start)
            if rec is not None and rec.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            records.pop(self.start, None)
            self.start += 1

    def _wake(self) -> None:
        self.broker.purgatory.check(self.wake_key)

    # -- state ------------------------------------------------------------------------------

    def state_batches(self) -> list[StateBatch]:
        """The in-flight window as state batches: runs of one state and delivery count."""
        out: list[StateBatch] = []
        for offset, state, count in self._states():
            if out and out[-1].last_offset == offset - 1 and out[-1][2:] == (state, count):
                out[-1] = out[-1]._replace(last_offset=offset)
            else:
                out.append(StateBatch(offset, offset, state, count))
        return out

    def delivery_complete_count(self) -> int:
        """Offsets of the in-flight window whose delivery is complete (acknowledged, archived,
        or holding nothing to deliver): Kafka's DeliveryCompleteCount, for the group's lag."""
        records = self.records
        return sum(
            1
            for o in range(self.start, self.end)
            if (r := records.get(o)) is None or r.state in (ACKNOWLEDGED, ARCHIVED)
        )

    def _states(self) -> Iterator[tuple[int, int, int]]:
        for offset in range(self.start, self.end):
            rec = self.records.get(offset)
            if rec is None:
                yield offset, ARCHIVED, 0
            else:
                yield offset, AVAILABLE if rec.state in (ACQUIRED, RELEASING) else rec.state, rec.count

    def persist_soon(self) -> None:
        """Write the state in the background (locks ran out, a member left). A write not yet
        started writes the state as it is when its turn comes, so it covers later changes as
        well: a burst of locks running out makes one write, not one each."""
        if not self._write_due:
            self._write_due = True
            self.manager.spawn(self.persist(), f"write share state {self.key}")

    async def persist(self) -> ErrorCode:
        """Write the state as it is when its turn comes; writes leave in the order they were made."""
        group, topic_id, index = self.key
        async with self._writes:
            if self.dropped:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            self._write_due = False  # what changed until now is in this write
            state = (self.state_epoch, self.leader_epoch, self.start, self.state_batches())
            error = await self.broker.share_state.write_state(
                group, topic_id, index, *state, delivery_complete_count=self.delivery_complete_count()
            )
        if error in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
            log.info("share partition %s was fenced (%s); it reloads", self.key, error.name)
            self.manager.drop(self)
        return error

    def close(self) -> None:
        """Dropped: cancel the lock timers (the records come back from the persisted state)."""
        self.dropped = True
        for rec in self.records.values():
            if rec.lock is not None and rec.lock.timer is not None:
                rec.lock.timer.cancel()
        self._wake()


def _throttle_from(deliveries: int) -> int:
    """The delivery count from which records are delivered in smaller runs (Kafka's
    throttleRecordsDeliveryLimit): half the limit, rounded up, at least 2."""
    return max(2, -(-deliveries // 2))


def _throttled_records(header, count: int, deliveries: int) -> int:
    """How many records of a throttled batch one fetch takes: its size halved once for each
    delivery from the throttle on (Kafka's acquireSubsetBatchRecords), at least one."""
    return max(1, (header.last_offset - header.base_offset + 1) >> (count - _throttle_from(deliveries) + 1))


def _ranges(offsets: list[int], counts: list[int], starts: set[int], batch_size: int) -> list[tuple[int, int, int]]:
    """Consecutive offsets of one delivery count as (first, last, count); with ``batch_size``
    above 0, a range of at least that many records ends before the next of ``starts`` (where
    a batch's records begin), as Kafka's createBatches splits the acquired records."""
    out: list[list[int]] = []
    for offset, count in zip(offsets, counts, strict=True):
        last = out[-1] if out else None
        if last is None or last[1] != offset - 1 or last[2] != count:
            out.append([offset, offset, count])
        elif offset in starts and 0 < batch_size <= offset - last[0]:
            out.append([offset, offset, count])  # the range holds batch_size records: the next begins
        else:
            last[1] = offset
    return [tuple(r) for r in out]
