"""Event-loop lag behind disk work: how long a request waits while segments roll.

A real brokkr broker runs as a subprocess. A probe thread keeps its own connection and
sends ApiVersions every ``--probe-ms`` (the cheapest request: its round trip is the time
it waited for the broker's event loop, plus a few hundred microseconds of work), timing
each round trip. Three phases, each ``--seconds`` long:

- **idle**: the probe alone;
- **no rolls**: a confluent-kafka producer (acks=1, in a child process) writes
  ``--rate-mb`` MiB/s (20) into a topic with ``segment.bytes`` 1 GiB, so no segment
  rolls: the lag the produce path itself causes (the loop is busy handling produce
  requests);
- **rolls**: the same producer into a topic with ``segment.bytes`` ``--segment-mb`` (1
  MiB), so a segment rolls every megabyte, each with its fsync, producer snapshot and
  index trims;
- **creation**: a CreateTopics of ``--create-partitions`` (1000) partitions, the probe
  running until it is answered: each partition's directory and files are made on the
  event loop, a few at a time (``Broker.create_topic_in_turns``).

The wait behind disk work is what the rolls phase adds to the no-rolls phase: the report
gives p50/p99/max of the probe's round trip per phase, the number of rolls, and the excess
of the rolls phase's p99 and max over the no-rolls phase's (the target: <= 5 ms); for the
creation phase, the excess of its max over the idle phase's, and how long the creation took. Phases
alternate over ``--repeat`` rounds and medians are reported; a shared machine is noisy.

    .venv-test/bin/python benchmarks/loop_lag.py [--seconds 10] [--repeat 3] [--dir /var/tmp]
        [--create-partitions 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
from pathlib import Path

from brokkr.core.client import RawClient
from brokkr.core.protocol.frames import request_spec
from confluent_kafka import Producer
from produce import create_topic, free_port, start_broker, stop_broker

API_VERSIONS = 18
TARGET_MS = 5.0


class Probe(threading.Thread):
    """ApiVersions back to back on one connection, ``every`` seconds apart."""

    def __init__(self, bootstrap: str, every: float):
        super().__init__(daemon=True)
        self.client = RawClient(bootstrap)
        self.body = request_spec(API_VERSIONS).cls()
        self.every = every
        self.rtts: list[float] = []
        self.recording = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            started = time.perf_counter()
            self.client.request(API_VERSIONS, 3, self.body)
            if self.recording.is_set():
                self.rtts.append((time.perf_counter() - started) * 1000)
            time.sleep(self.every)

    def measure(self, seconds: float, load=None) -> list[float]:
        self.rtts = []
        self.recording.set()
        if load is None:
            time.sleep(seconds)
        else:
            load(seconds)
            time.sleep(0.05)  # the probe sent during the load's last stall is answered after it
        self.recording.clear()
        return self.rtts


def produce(bootstrap: str, topic: str, value_size: int, rate_mb: float, seconds: float) -> None:
    """The load, in a child process (a Python producer loop here would hold this process's
    GIL and delay the probe's thread, which is not the broker's doing), paced to
    ``rate_mb`` MiB/s so that the broker's loop is not simply saturated (0: unpaced)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "log_level": 4})
    value = b"x" * value_size
    started = time.monotonic()
    deadline = started + seconds
    per_record = value_size / (rate_mb * (1 << 20)) if rate_mb else 0.0
    i = 0
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value, b"key-%d" % i, partition=0)
            i += 1
        except BufferError:
            producer.poll(0.005)
        if i % 256 == 0:
            producer.poll(0)
            ahead = started + i * per_record - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    producer.flush(30)


def produce_for(bootstrap: str, topic: str, value_size: int, rate_mb: float):
    def load(seconds: float) -> None:
        given = (bootstrap, topic, value_size, rate_mb, seconds)
        child = multiprocessing.get_context("fork").Process(target=produce, args=given)
        child.start()
        child.join(seconds + 60)

    return load


def summary(rtts: list[float]) -> dict:
    ordered = sorted(rtts)
    return {
        "probes": len(ordered),
        "p50_ms": ordered[len(ordered) // 2],
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": ordered[-1],
        "over_5ms": sum(r > TARGET_MS for r in ordered),
    }


def segments_of(data: Path, topic: str) -> int:
    return len(list((data / f"{topic}-0").glob("*.log")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="per phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--segment-mb", type=float, default=1.0)
    parser.add_argument("--value-size", type=int, default=1000)
    parser.add_argument("--rate-mb", type=float, default=20.0, help="MiB/s produced (0: as fast as it goes)")
    parser.add_argument("--probe-ms", type=float, default=2.0)
    parser.add_argument("--dir", default=None, help="where the broker's log directory goes")
    parser.add_argument("--create-partitions", type=int, default=1000, help="of the creation phase's topic")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    rounds: dict[str, list[dict]] = {"idle": [], "no_rolls": [], "rolls": [], "creation": []}
    rolls, creation_s, wide_n = [], [], args.create_partitions
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, open(Path(tmp) / "broker.err", "w") as err:
        data = Path(tmp) / "data"
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        proc = start_broker(port, str(data), err)
        try:
            probe = Probe(bootstrap, args.probe_ms / 1000)
            probe.start()
            for r in range(args.repeat):
                big, small = f"big-{r}", f"small-{r}"
                create_topic(bootstrap, big, {"segment.bytes": str(1 << 30)})
                create_topic(bootstrap, small, {"segment.bytes": str(int(args.segment_mb * (1 << 20)))})
                rounds["idle"].append(summary(probe.measure(args.seconds)))
                rounds["no_rolls"].append(
                    summary(probe.measure(args.seconds, produce_for(bootstrap, big, args.value_size, args.rate_mb)))
                )
                rounds["rolls"].append(
                    summary(probe.measure(args.seconds, produce_for(bootstrap, small, args.value_size, args.rate_mb)))
                )
                rolls.append(segments_of(data, small) - 1)
                started = time.perf_counter()
                wide = probe.measure(0, lambda _, name=f"wide-{r}": create_topic(bootstrap, name, partitions=wide_n))
                creation_s.append(time.perf_counter() - started)
                rounds["creation"].append(summary(wide))
                print(
                    f"round {r + 1}: rolls={rolls[-1]} "
                    + " ".join(
                        f"{phase}: p50={s[-1]['p50_ms']:.2f} p99={s[-1]['p99_ms']:.2f} max={s[-1]['max_ms']:.1f}"
                        for phase, s in rounds.items()
                    )
                )
            probe.done.set()
            probe.join(timeout=5)
        finally:
            stop_broker(proc)

    medians = {phase: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for phase, runs in rounds.items()}
    excess_p99 = medians["rolls"]["p99_ms"] - medians["no_rolls"]["p99_ms"]
    excess_max = medians["rolls"]["max_ms"] - medians["no_rolls"]["max_ms"]
    print(f"\nmedians over {args.repeat} rounds, {args.seconds:.0f} s per phase, probe every {args.probe_ms} ms")
    print(f"{'phase':10} {'probes':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>5 ms':>6}")
    for phase, m in medians.items():
        cells = f"{m['probes']:7.0f} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} {m['max_ms']:8.1f}"
        print(f"{phase:10} {cells} {m['over_5ms']:6.0f}")
    print(f"rolls per round: {rolls}")
    excess_creation = medians["creation"]["max_ms"] - medians["idle"]["max_ms"]
    print(
        f"creating {args.create_partitions} partitions took {statistics.median(creation_s):.2f} s (median); "
        f"the wait behind it (creation max minus idle max): {excess_creation:+.1f} ms"
    )
    ok = excess_max <= TARGET_MS
    print(
        f"wait behind disk work (rolls minus no rolls): p99 {excess_p99:+.2f} ms, max {excess_max:+.1f} ms: "
        f"{'<=' if ok else '>'} {TARGET_MS:.0f} ms"
    )
    if args.json:
        result = {"medians": medians, "rounds": rounds, "rolls": rolls, "excess_p99_ms": excess_p99}
        result |= {"excess_max_ms": excess_max, "within_target": ok}
        result |= {"creation_s": creation_s, "excess_creation_max_ms": excess_creation}
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
