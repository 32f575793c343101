"""Compaction throughput beside a plain read and rewrite of the same bytes, in one run.

A broker (in-process, cleaner disabled) gets a compacted topic of ``--records`` keyed
records over ``--keys`` keys; then, on the same segment files:

- **copy**: read every rolled segment in ``log.cleaner.io.buffer.size`` chunks, write it
  to a new file and fsync it (the floor any cleaner pays);
- **clean**: one cleaning by plugins/storage/segment/cleaner.py (key map, filter,
  rewrite, indexes, fsync, ``.swap``), timed on a cleaner thread.

MB/s is of the bytes read (the cleanable segments' size); the ratio is clean/copy.
``--repeat N`` times both N times, alternating, and reports the medians (on a shared
machine, a burst of other work then moves one sample, not the result).

    .venv-test/bin/python benchmarks/compaction.py [--records 300000] [--keys 10000] [--value-size 100] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from brokkr.core.broker import BrokerThread
from brokkr.plugins.storage.segment import cleaner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1, help="time copy and clean this many times each, alternating")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        conf = {"log.dirs": tmp + "/data", "listeners": "PLAINTEXT://127.0.0.1:0", "log.cleaner.enable": "false"}
        broker = BrokerThread(conf).start()
        try:
            bootstrap = broker.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = NewTopic("c", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": str(4 << 20)})
            admin.create_topics([topic])["c"].result(timeout=20)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
            value = b"v" * args.value_size
            for i in range(args.records):
                while True:
                    try:
                        producer.produce("c", key=b"key-%08d" % (i % args.keys), value=value)
                        break
                    except BufferError:
                        producer.poll(0.01)
            assert producer.flush(120) == 0
            plog = broker.topics["c"].partitions[0].log
            segs = plog._segments[:-1]
            size = sum(s.size for s in segs)
            chunk = broker.storage.cleaner.settings.io_buffer_size

            def copy() -> None:
                out = os.open(os.path.join(tmp, "copy"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    for s in segs:
                        pos = 0
                        while pos < s.size:
                            buf = os.pread(s.fd, min(chunk, s.size - pos), pos)
                            os.write(out, buf)
                            pos += len(buf)
                    os.fsync(out)
                finally:
                    os.close(out)

            def clean():
                now = int(time.time() * 1000)
                return cleaner.clean(plog, broker.storage.codecs, 0, now, broker.storage.cleaner.settings)

            copies, cleans = [], []
            with ThreadPoolExecutor(1) as pool:
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    pool.submit(copy).result()
                    copies.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    result = pool.submit(clean).result()  # .swap files, never installed: the same work each time
                    cleans.append(time.perf_counter() - t)
            copy_s, clean_s = statistics.median(copies), statistics.median(cleans)
            copy_mb, clean_mb = size / copy_s / 1e6, size / clean_s / 1e6
            print(f"segments: {len(segs)}, {size / 1e6:.1f} MB, {args.records} records over {args.keys} keys")
            print(f"copy  (read + write + fsync): {copy_mb:8.1f} MB/s")
            print(f"clean (cleaner.clean):        {clean_mb:8.1f} MB/s  -> {result.written / 1e6:.2f} MB kept")
            print(f"ratio clean/copy: {clean_mb / copy_mb:.3f}", flush=True)
            if args.repeat > 1:
                ms = [[round(s * 1000) for s in samples] for samples in (copies, cleans)]
                print(f"samples (ms): copy {ms[0]}, clean {ms[1]}")
            producer.flush(1)
            del producer, admin
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
