"""The storage contract as a test suite: every storage backend must pass it.

A backend's tests subclass :class:`StorageContract` and say which backend to test::

    from brokkr.core.storage_contract import StorageContract

    class TestMyStorage(StorageContract):
        storage_name = "mine"           # the value of brokkr.storage that selects it
        plugins = (my_plugin_module,)   # unless it is installed through an entry point

pytest then runs every ``test_*`` method below against it: appends, reads at every
offset and within size limits, lookups by timestamp, truncation, retention, broker state
documents, and (for backends with ``durable = True``) restarts. The storage is opened
through the ``brokkr_open_storage`` hook, exactly as a broker opens it.

Each capability the storage declares (``Storage.capabilities``, see
:mod:`brokkr.core.log`) has tests of its own, run only when it is declared (skipped,
saying so, otherwise): leader epochs, read regions, the aborted-transaction index,
producer snapshots, the kept high watermark, compaction, log dirs. A storage whose logs
lack a capability it declares fails ``test_declared_capabilities_are_implemented``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from . import file_region
from .broker import Broker
from .file_region import FileRegion
from .log import (
    OF_THE_STORAGE,
    AppendInfo,
    Capability,
    OffsetOutOfRange,
    PartitionLog,
    Storage,
    StoredTopic,
    unimplemented,
)
from .protocol.records import build_batch, iter_batches_untrusted, next_offset_after, patch_batch, read_all_records
from .retention import retention_offset
from .txn_index import AbortedTxn

MIB = 1 << 20


class Harness:
    """Opens the backend's storage in a directory, as a broker would, and reopens it."""

    def __init__(self, contract: StorageContract, directory: Path):
        self.contract = contract
        self.directory = directory
        self.storage: Storage | None = None
        self.logs: list[PartitionLog] = []

    def open(self) -> Storage:
        config = {"brokkr.storage": self.contract.storage_name, "log.dirs": str(self.directory)}
        self.broker = Broker(config, self.contract.plugins)
        self.storage = self.broker.open_storage()
        return self.storage

    def log(self, name: str = "t", partition: int = 0, **configs: Any) -> PartitionLog:
        """Create topic ``name`` with ``configs`` (once) and open one of its partitions."""
        storage = self.storage or self.open()
        topics = {t.name: t for t in storage.load_topics()}
        stored = topics.get(name)
        if stored is None:
            stored = StoredTopic(name, uuid.uuid4(), partition + 1, {k: str(v) for k, v in configs.items()})
            storage.save_topics([*topics.values(), stored])
        plog = storage.open_log(stored, partition, self.broker.config.topic_config(stored.configs))
        self.logs.append(plog)
        return plog

    def restart(self, name: str = "t", partition: int = 0) -> PartitionLog:
        """Close everything cleanly, open the storage again and reopen one log."""
        self.close()
        self.open()
        return self.log(name, partition)

    def close(self) -> None:
        for plog in self.logs:
            plog.close()
        self.logs = []
        if self.storage is not None:
            self.storage.close()
            self.storage = None


def append(
    plog: PartitionLog, records: int = 1, timestamp: int = 1_000, value_size: int = 10, keyed: list | None = None
) -> AppendInfo:
    """Append one batch as the core does: offsets patched in, starting at the log end;
    ``keyed``, a list of (key, value), instead of ``records`` records of keys k0, k1, ..."""
    first = plog.log_end_offset
    keyed = keyed or [(b"k%d" % i, b"v" * value_size) for i in range(records)]
    batch = bytearray(build_batch(keyed, timestamp=timestamp))
    patch_batch(batch, 0, first, 0)
    return plog.append(batch, first, first + len(keyed) - 1, timestamp, len(keyed))


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for r in read_all_records(data)]


class StorageContract:
    """The behaviour every :class:`brokkr.core.log.Storage` backend shares."""

    storage_name: str = ""
    plugins: tuple = ()
    #: False for backends that keep nothing across restarts (their restart tests skip).
    durable: bool = True

    @pytest.fixture
    def harness(self, tmp_path: Path):
        h = Harness(self, tmp_path / "logs")
        yield h
        h.close()

    def _need_durable(self) -> None:
        if not self.durable:
            pytest.skip(f"brokkr.storage={self.storage_name} keeps nothing across restarts")

    def _need(self, harness, capability: Capability) -> None:
        """Skip unless the storage declares ``capability``."""
        if harness.storage is None:
            harness.open()
        if capability not in harness.broker.storage_capabilities.declared:
            pytest.skip(f"brokkr.storage={self.storage_name} does not declare Capability.{capability.name}")

    # -- capabilities -----------------------------------------------------------------------

    def test_declared_capabilities_are_implemented(self, harness):
        """What ``Storage.capabilities`` declares, the storage (COMPACTION, LOG_DIRS) and
        each log it opens implement: the broker then uses it without asking."""
        storage = harness.open()
        declared = harness.broker.storage_capabilities.declared
        assert not unimplemented(storage, declared & OF_THE_STORAGE)
        missing = unimplemented(harness.log(), declared & ~OF_THE_STORAGE)
        assert not missing, f"its logs lack the declared {missing} (see the protocols in brokkr.core.log)"

    # -- appending and reading ----------------------------------------------------------

    def test_a_new_log_is_empty(self, harness):
        plog = harness.log()
        assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
        assert plog.read(0, MIB, 0, True) == b""
        assert plog.offset_for_timestamp(0) is None
        assert plog.max_timestamp() is None
        [segment] = plog.segments()
        assert (segment.base_offset, segment.next_offset) == (0, 0)

    def test_appends_are_read_back_from_every_offset(self, harness):
        plog = harness.log()
        for i in range(30):
            info = append(plog, records=1 + i % 3)
            assert info.last_offset - info.first_offset + 1 == info.record_count
        end = plog.log_end_offset
        assert end == sum(1 + i % 3 for i in range(30))
        for offset in range(end):
            got = offsets_in(plog.read(offset, MIB, end, True))
            assert got[0] <= offset <= got[-1]
            assert got == list(range(got[0], end)), "a read returns whole, contiguous batches"
        assert plog.read(end, MIB, end, True) == b""

    def test_reads_respect_max_bytes_min_one_and_max_offset(self, harness):
        plog = harness.log()
        sizes = [append(plog, records=2).size for _ in range(5)]
        assert plog.read(0, sizes[0] - 1, 10, False) == b""
        first = plog.read(0, sizes[0] - 1, 10, True)
        assert offsets_in(first) == [0, 1], "min_one returns the first batch even when too large (KIP-74)"
        two_and_a_half = plog.read(0, sizes[0] + sizes[1] + sizes[2] // 2, 10, False)
        assert offsets_in(two_and_a_half) == [0, 1, 2, 3]
        assert offsets_in(plog.read(0, MIB, 4, True)) == [0, 1, 2, 3], "nothing at or past max_offset"
        assert plog.read(4, MIB, 4, True) == b""

    def test_reads_outside_the_log_raise_offset_out_of_range(self, harness):
        plog = harness.log()
        append(plog, records=3)
        with pytest.raises(OffsetOutOfRange):
            plog.read(4, MIB, 3, True)
        with pytest.raises(OffsetOutOfRange):
            plog.read(-1, MIB, 3, True)

    @pytest.mark.parametrize("min_bytes", [1, file_region.MIN_BYTES])
    def test_read_region_chooses_the_batches_read_does(self, harness, monkeypatch, min_bytes):
        """READ_REGIONS: at every offset, within every size limit, below
        every max_offset, with and without min_one, its file holds exactly the bytes
        ``read`` returns, and it knows where they end; or, for fewer bytes than
        ``file_region.MIN_BYTES`` (every read here at its default), it answers them."""
        monkeypatch.setattr(file_region, "MIN_BYTES", min_bytes)
        self._need(harness, Capability.READ_REGIONS)
        plog = harness.log(**{"segment.bytes": 1000})
        sizes = [append(plog, records=1 + i % 3, value_size=40 + 30 * (i % 4)).size for i in range(30)]
        end = plog.log_end_offset
        assert len(plog.segments()) > 3
        for offset in range(end + 1):
            for max_bytes in (0, sizes[0] - 1, 2 * max(sizes) + 7, MIB):
                for max_offset in (offset, offset + 1, end - 3, end):
                    for min_one in (True, False):
                        data = plog.read(offset, max_bytes, max_offset, min_one)
                        region = plog.read_region(offset, max_bytes, max_offset, min_one)
                        if not data:
                            assert region is None, (offset, max_bytes, max_offset, min_one)
                            continue
                        if not isinstance(region, FileRegion):
                            assert len(data) < min_bytes and region == data, (offset, max_bytes, max_offset, min_one)
                            continue
                        try:
                            assert region.read() == data, (offset, max_bytes, max_offset, min_one)
                            assert region.next_offset == next_offset_after(data, -1)
                        finally:
                            region.close()
        for outside in (-1, end + 1):
            with pytest.raises(OffsetOutOfRange):
                plog.read_region(outside, MIB, end, True)

    def test_segments_roll_on_segment_bytes_and_tile_the_log(self, harness):
        plog = harness.log(**{"segment.bytes": 1000})
        rolled = [info.rolled for info in (append(plog, value_size=100) for _ in range(40)) if info.rolled]
        segments = plog.segments()
        assert len(segments) > 3
        assert len(rolled) == len(segments) - 1
        for seg, following in zip(segments, segments[1:]):
            assert seg.next_offset == following.base_offset
            assert 0 < seg.size <= 1000
        assert segments[0].base_offset == 0 and segments[-1].next_offset == plog.log_end_offset
        assert [(r.base_offset, r.next_offset) for r in rolled] == [
            (s.base_offset, s.next_offset) for s in segments[:-1]
        ]
        assert offsets_in(b"".join(_read_all(plog))) == list(range(plog.log_end_offset))

    # -- timestamps ---------------------------------------------------------------------

    def test_offset_for_timestamp_finds_the_first_record_at_or_after(self, harness):
        plog = harness.log(**{"segment.bytes": 300})
        for ts in (1000, 2000, 1500, 3000, 2500):
            append(plog, records=2, timestamp=ts)
        found = {ts: plog.offset_for_timestamp(ts) for ts in (0, 1000, 1001, 1600, 2000, 2600, 3000)}
        assert {ts: (f.offset, f.timestamp) for ts, f in found.items()} == {
            0: (0, 1000),
            1000: (0, 1000),
            1001: (2, 2000),
            1600: (2, 2000),
            2000: (2, 2000),
            2600: (6, 3000),
            3000: (6, 3000),
        }
        assert plog.offset_for_timestamp(3001) is None

    def test_max_timestamp_is_the_earliest_record_carrying_it(self, harness):
        plog = harness.log(**{"segment.bytes": 300})
        for ts in (1000, 5000, 2000, 5000, 3000):
            append(plog, records=2, timestamp=ts)
        found = plog.max_timestamp()
        assert (found.offset, found.timestamp) == (2, 5000)

    # -- truncation, deletion, retention ---------------------------------------------------

    def test_truncate_to_drops_the_tail_and_appends_continue_there(self, harness):
        plog = harness.log(**{"segment.bytes": 400})
        for _ in range(20):
            append(plog, records=2, value_size=50)
        plog.truncate_to(14)
        assert plog.log_end_offset == 14
        assert offsets_in(b"".join(_read_all(plog))) == list(range(14))
        assert plog.segments()[-1].next_offset == 14
        with pytest.raises(OffsetOutOfRange):
            plog.read(15, MIB, 40, True)
        assert append(plog, records=2).first_offset == 14
        assert offsets_in(plog.read(14, MIB, 16, True)) == [14, 15]
        with pytest.raises(ValueError):
            plog.truncate_to(5)  # inside a batch

    def test_delete_before_advances_the_log_start_and_drops_whole_segments(self, harness):
        plog = harness.log(**{"segment.bytes": 400})
        for ts in range(20):
            append(plog, records=2, value_size=50, timestamp=1000 + ts)
        before = plog.segments()
        plog.delete_before(11)
        assert plog.log_start_offset == 11
        after = plog.segments()
        assert after[0].base_offset <= 11 < after[0].next_offset
        assert after == [s for s in before if s.next_offset > 11]
        assert 11 in offsets_in(plog.read(11, MIB, 40, True))
        with pytest.raises(OffsetOutOfRange):
            plog.read(10, MIB, 40, True)
        assert plog.offset_for_timestamp(0).offset == 11
        plog.delete_before(3)
        assert plog.log_start_offset == 11, "the log start never moves back"

    def _filled(self, harness, **configs) -> PartitionLog:
        """30 batches in segments of two, one second apart from t=1 s to t=30 s."""
        plog = harness.log(**{"segment.bytes": 400, **configs})
        for ts in range(30):
            append(plog, records=2, value_size=50, timestamp=1000 + ts * 1000)
        return plog

    def _apply_retention(self, harness, plog, now, **configs) -> None:
        config = harness.broker.config.topic_config(configs)
        offset = retention_offset(plog.segments(), config, now, plog.log_end_offset, plog.log_start_offset)
        if offset is not None:
            plog.delete_before(offset)

    def test_retention_bytes_drops_the_oldest_segments_beyond_the_limit(self, harness):
        plog = self._filled(harness)
        before = plog.segments()
        self._apply_retention(harness, plog, 30_000, **{"retention.bytes": "1000"})
        kept = plog.segments()
        # Kafka drops a segment only while the rest still reaches retention.bytes.
        assert sum(s.size for s in kept) - kept[0].size < 1000 <= sum(s.size for s in kept)
        assert kept == before[-len(kept) :]
        assert plog.log_start_offset == kept[0].base_offset

    def test_retention_ms_drops_segments_whose_newest_record_is_too_old(self, harness):
        plog = self._filled(harness)
        before = plog.segments()
        self._apply_retention(harness, plog, 30_000, **{"retention.ms": "10000"})
        kept = plog.segments()
        assert kept == [s for s in before if 30_000 - s.max_timestamp <= 10_000]
        # The active segment too, as in Kafka: an empty one takes over at the log end.
        self._apply_retention(harness, plog, 10**13, **{"retention.ms": "10000"})
        [empty] = plog.segments()
        assert (empty.base_offset, empty.next_offset, empty.size) == (60, 60, 0)
        assert plog.log_start_offset == plog.log_end_offset == 60
        assert plog.read(60, MIB, 60, True) == b""
        assert append(plog, records=2).first_offset == 60
        assert offsets_in(plog.read(60, MIB, 62, True)) == [60, 61]

    def test_retention_keeps_the_active_segment_until_the_high_watermark_reaches_its_end(self, harness):
        plog = self._filled(harness)
        config = harness.broker.config.topic_config({"retention.ms": "10000"})
        end = plog.log_end_offset
        active = plog.segments()[-1]
        assert retention_offset(plog.segments(), config, 10**13, end - 1, 0) == active.base_offset
        plog.delete_before(active.base_offset)
        assert plog.segments() == [active]
        assert retention_offset(plog.segments(), config, 10**13, end, plog.log_start_offset) == end

    def test_retention_keeps_everything_by_default_and_with_compaction(self, harness):
        plog = self._filled(harness)
        before = plog.segments()
        self._apply_retention(harness, plog, 10**13, **{"retention.ms": "-1"})
        self._apply_retention(harness, plog, 10**13, **{"cleanup.policy": "compact", "retention.bytes": "1"})
        assert plog.segments() == before

    # -- producer snapshots and state documents -----------------------------------------------

    def test_producer_snapshots_latest_at_or_below_the_log_end(self, harness):
        self._need(harness, Capability.PRODUCER_SNAPSHOTS)
        plog = harness.log()
        assert plog.latest_producer_snapshot() is None
        for end, data in ((2, b"at 2"), (4, b"at 4"), (6, b"at 6")):
            append(plog, records=2)
            plog.write_producer_snapshot(end, data)
        assert plog.latest_producer_snapshot() == (6, b"at 6")
        plog.write_producer_snapshot(6, b"at 6, again")
        assert plog.latest_producer_snapshot() == (6, b"at 6, again"), "a snapshot at the same offset is replaced"
        plog.truncate_to(4)
        assert plog.latest_producer_snapshot() == (4, b"at 4"), "the snapshot above the new end is gone"
        append(plog, records=2)
        assert plog.latest_producer_snapshot() == (4, b"at 4")

    def test_state_documents_are_read_back_and_replaced(self, harness):
        storage = harness.open()
        assert storage.read_state("producer-ids") is None
        storage.write_state("producer-ids", '{"next": 1000}')
        storage.write_state("other", "x")
        storage.write_state("producer-ids", '{"next": 2000}')
        assert (storage.read_state("producer-ids"), storage.read_state("other")) == ('{"next": 2000}', "x")

    # -- restarts (durable backends) ---------------------------------------------------------

    def test_a_restart_keeps_state_documents(self, harness):
        self._need_durable()
        harness.log()
        harness.storage.write_state("producer-ids", '{"next": 1000}')
        harness.restart()
        assert harness.storage.read_state("producer-ids") == '{"next": 1000}'

    def test_a_restart_keeps_producer_snapshots(self, harness):
        self._need_durable()
        self._need(harness, Capability.PRODUCER_SNAPSHOTS)
        plog = harness.log()
        for end in (2, 4, 6):
            append(plog, records=2)
            plog.write_producer_snapshot(end, b"state at %d" % end)
        plog = harness.restart()
        assert plog.latest_producer_snapshot() == (6, b"state at 6")
        plog.truncate_to(4)
        assert plog.latest_producer_snapshot() == (4, b"state at 4"), "the two newest are kept"

    def test_a_restart_keeps_records_offsets_timestamps_and_the_catalog(self, harness):
        self._need_durable()
        plog = harness.log(**{"segment.bytes": 400, "retention.ms": 123456})
        for ts in range(20):
            append(plog, records=2, value_size=50, timestamp=5000 - ts)
        plog.delete_before(7)
        content = b"".join(_read_all(plog))
        by_ts = plog.offset_for_timestamp(4990)
        latest = plog.max_timestamp()
        segments = plog.segments()
        plog = harness.restart()
        assert (plog.log_start_offset, plog.log_end_offset) == (7, 40)
        assert b"".join(_read_all(plog)) == content
        assert plog.offset_for_timestamp(4990) == by_ts
        assert plog.max_timestamp() == latest
        assert plog.segments() == segments
        [stored] = harness.storage.load_topics()
        assert stored.configs == {"segment.bytes": "400", "retention.ms": "123456"}
        assert append(plog).first_offset == 40

    def test_a_deleted_partition_is_gone_after_a_restart(self, harness):
        self._need_durable()
        harness.open()
        snapshots = harness.broker.storage_capabilities.producer_snapshots
        plog = harness.log()
        append(plog, records=3)
        if snapshots:
            plog.write_producer_snapshot(3, b"state")
        plog.delete()
        harness.logs.remove(plog)
        plog = harness.restart()
        assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
        assert not snapshots or plog.latest_producer_snapshot() is None

    # -- aborted transactions (TXN_INDEX: a log without them gets the core's list) --------

    def test_aborted_txns_are_found_by_the_range_they_overlap(self, harness):
        self._need(harness, Capability.TXN_INDEX)
        plog = harness.log(**{"segment.bytes": 200})
        for _ in range(12):
            append(plog, records=2, value_size=40)
        txns = [AbortedTxn(1, 0, 3, 4), AbortedTxn(2, 2, 9, 10), AbortedTxn(3, 12, 20, 21)]
        for txn in txns:
            plog.append_aborted_txn(txn)
        assert plog.aborted_txns(0, 24) == txns
        assert plog.aborted_txns(4, 12) == txns[1:2]
        assert plog.aborted_txns(10, 13) == txns[2:]
        assert plog.aborted_txns(21, 24) == []
        plog.truncate_to(10)
        assert plog.aborted_txns(0, 10) == txns[:2], "entries whose marker is past the end go"
        plog.truncate_aborted_txns(5)
        assert plog.aborted_txns(0, 10) == txns[:1]

    def test_a_restart_keeps_aborted_txns(self, harness):
        self._need_durable()
        self._need(harness, Capability.TXN_INDEX)
        plog = harness.log(**{"segment.bytes": 200})
        for _ in range(6):
            append(plog, records=2, value_size=40)
        plog.append_aborted_txn(AbortedTxn(1, 1, 7, 8))
        plog = harness.restart()
        assert plog.aborted_txns(0, 12) == [AbortedTxn(1, 1, 7, 8)]
        plog.delete_before(10)
        assert plog.aborted_txns(10, 12) == []

    # -- leader epochs (LEADER_EPOCHS: a cluster needs them) -----------------------------------

    def _epochs_at_0_2_4(self, harness) -> PartitionLog:
        """Epoch 3 from offset 0, 5 from 2 and 7 from 4, each with two records but the last."""
        self._need(harness, Capability.LEADER_EPOCHS)
        plog = harness.log()
        assert plog.leader_epochs() == []
        for epoch in (3, 5):
            plog.assign_epoch(epoch)
            append(plog, records=2)
        plog.assign_epoch(7)
        return plog

    def test_leader_epochs_start_at_the_log_end_when_assigned(self, harness):
        plog = self._epochs_at_0_2_4(harness)
        assert plog.leader_epochs() == [(3, 0), (5, 2), (7, 4)]
        plog.assign_epoch(7)
        plog.assign_epoch(6)
        assert plog.leader_epochs() == [(3, 0), (5, 2), (7, 4)], "an epoch not above the latest is ignored"

    def test_truncation_drops_the_leader_epochs_from_its_offset_on(self, harness):
        plog = self._epochs_at_0_2_4(harness)
        plog.truncate_to(4)
        assert plog.leader_epochs() == [(3, 0), (5, 2)], "one at the log end goes though no record does"
        plog.truncate_to(2)
        assert plog.leader_epochs() == [(3, 0)]
        plog.assign_epoch(9)
        assert plog.leader_epochs() == [(3, 0), (9, 2)]

    def test_delete_before_moves_the_leader_epoch_in_force_to_the_new_start(self, harness):
        plog = self._epochs_at_0_2_4(harness)
        plog.delete_before(3)
        assert plog.leader_epochs() == [(5, 3), (7, 4)]

    def test_a_restart_keeps_leader_epochs(self, harness):
        self._need_durable()
        plog = self._epochs_at_0_2_4(harness)
        plog = harness.restart()
        assert plog.leader_epochs() == [(3, 0), (5, 2), (7, 4)]

    # -- the kept high watermark (KEPT_HIGH_WATERMARK) -------------------------------------

    def test_a_restart_keeps_the_high_watermark_the_broker_set(self, harness):
        self._need(harness, Capability.KEPT_HIGH_WATERMARK)
        plog = harness.log()
        assert plog.high_watermark is None, "nothing kept yet"
        append(plog, records=4)
        plog.high_watermark, plog.last_stable_offset = 3, 2
        if self.durable:
            plog = harness.restart()
            assert plog.high_watermark == 3

    # -- compaction (COMPACTION) ------------------------------------------------------------

    def test_clean_logs_keeps_the_latest_record_of_each_key(self, harness):
        """``clean_logs``, called on the event loop as the broker's maintenance calls it,
        cleans a compacted log in the background: below the active segment, each key's
        latest record stays, at its offset, and the older ones go."""
        self._need(harness, Capability.COMPACTION)
        plog = harness.log(**{"cleanup.policy": "compact", "segment.bytes": 300, "min.cleanable.dirty.ratio": 0.01})
        for i in range(30):
            append(plog, keyed=[(b"key%d" % (i % 3), b"value %d" % i)])
        before = read_all_records(b"".join(_read_all(plog)))
        latest = {r.key: (r.offset, r.value) for r in before}
        active = plog.segments()[-1].base_offset

        async def cleaned() -> list:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                harness.storage.clean_logs()
                await asyncio.sleep(0.05)
                after = read_all_records(b"".join(_read_all(plog)))
                if len([r for r in after if r.offset < active]) <= 3:
                    return after
            raise AssertionError(f"not cleaned within 10 s: {len(after)} of {len(before)} records left")

        after = asyncio.run(cleaned())
        assert {r.key: (r.offset, r.value) for r in after} == latest
        assert [r.offset for r in after] == sorted(r.offset for r in after)
        kept = {(r.offset, r.key, r.value) for r in before}
        assert all((r.offset, r.key, r.value) in kept for r in after), "records are kept as they were"

    # -- log dirs (LOG_DIRS) ------------------------------------------------------------------

    def test_each_log_lies_in_one_of_the_log_dirs(self, harness):
        """DescribeLogDirs reports every one of ``dirs`` and finds a partition's by its
        segment paths: ``<dir>/<topic>-<partition>/<file>``."""
        self._need(harness, Capability.LOG_DIRS)
        dirs = [Path(d) for d in harness.storage.dirs]
        assert dirs and all(d.is_dir() for d in dirs)
        for name in ("a", "b", "c"):
            plog = harness.log(name)
            append(plog)
            for segment in plog.segments():
                path = Path(segment.path)
                assert path.parent.name == f"{name}-0" and path.parent.parent in dirs


def _read_all(plog: PartitionLog) -> list[bytes]:
    """Every batch from the log start, one read per batch (reads may stop at segment ends)."""
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1, plog.log_end_offset, True)
        [h] = list(iter_batches_untrusted(data))
        out.append(data)
        offset = h.base_offset + h.last_offset_delta + 1
    return out
