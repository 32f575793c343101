"""What read_committed costs a consumer's Fetch, against read_uncommitted, on one log.

A broker (in this process, on its own thread and event loop) holds one partition written
with raw requests: ``--batches`` batches of ``--records`` records of ``--value-size`` bytes,
every ``--txn-every``-th batch in a transaction of its own, every ``--abort-every``-th
transaction aborted (0: none); markers with ``write_txn_markers``. The whole log is then
read front to back with Fetch v12 (``--fetch-bytes`` per request) at isolation level 0
and 1, ``--repeat`` times each, alternating; the best run of each is printed::

    .venv-test/bin/python benchmarks/read_committed.py
    .venv-test/bin/python benchmarks/read_committed.py --txn-every 1 --abort-every 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from brokkr.core.broker import BrokerThread  # noqa: E402
from brokkr.core.protocol.records import TRANSACTIONAL_FLAG, build_batch, iter_batches_untrusted  # noqa: E402
from brokkr.core.testing import RawClient  # noqa: E402
from txn_wire import UNVERIFIED, end_txn, txn_produce  # noqa: E402
from wire import FETCH, fetch_body  # noqa: E402


def fill(broker, args) -> int:
    broker.call(broker.broker.create_topic, "bench")
    value = b"v" * args.value_size
    txns = 0
    pid_seq = {}
    for i in range(args.batches):
        pid = 1000 + i % 7
        transactional = args.txn_every and i % args.txn_every == 0
        seq = pid_seq.get(pid, 0)
        batch = build_batch(
            [(b"k%d" % j, value) for j in range(args.records)],
            timestamp=int(time.time() * 1000),
            attributes=TRANSACTIONAL_FLAG if transactional else 0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
        )
        pid_seq[pid] = seq + args.records
        assert txn_produce(broker, "bench", batch, acks=1, txn_id="t" if transactional else None).error_code == 0
        if transactional:
            txns += 1
            end_txn(broker, pid, not (args.abort_every and txns % args.abort_every == 0), [("bench", 0)])
    return broker.broker.partition("bench", 0).log.log_end_offset


def read_all(bootstrap: str, isolation: int, end: int, fetch_bytes: int) -> tuple[float, int, int]:
    """(seconds, requests, bytes) to read the partition front to back."""
    offset = requests = total = 0
    with RawClient(bootstrap) as c:
        start = time.perf_counter()
        while offset < end:
            body = fetch_body("bench", offset, partition_max_bytes=fetch_bytes, max_bytes=fetch_bytes)
            body.isolation_level = isolation
            part = c.request(FETCH, 12, body).responses[0].partitions[0]
            data = part.records or b""
            headers = list(iter_batches_untrusted(data))
            if not headers:
                break
            offset = headers[-1].last_offset + 1
            requests += 1
            total += len(data)
        return time.perf_counter() - start, requests, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--txn-every", type=int, default=3)
    parser.add_argument("--abort-every", type=int, default=4)
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data, "log.segment.bytes": str(8 << 20)}
        config.update(UNVERIFIED)  # transactions driven by hand: no coordinator to verify with
        with BrokerThread(config) as broker:
            end = fill(broker, args)
            aborted = broker.broker.partition("bench", 0).aborted.aborted_txns(0, end)
            print(f"log: {end} offsets, {len(aborted)} aborted transactions")
            best = {0: None, 1: None}
            for _ in range(args.repeat):
                for isolation in (0, 1):
                    run = read_all(broker.bootstrap_servers, isolation, end, args.fetch_bytes)
                    if best[isolation] is None or run[0] < best[isolation][0]:
                        best[isolation] = run
            for isolation, (seconds, requests, total) in best.items():
                name = ("read_uncommitted", "read_committed")[isolation]
                print(
                    f"{name:17} {requests:5} fetches {total / 1e6:7.2f} MB  {seconds * 1e3:8.1f} ms  "
                    f"{seconds / requests * 1e6:8.0f} us/fetch  {total / seconds / 1e6:7.1f} MB/s"
                )


if __name__ == "__main__":
    main()
