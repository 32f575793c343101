"""Schema validation on produce, off against ``id`` and ``payload``, and the registry's reads.

Three brokkr brokers run as subprocesses, side by side (started as ``produce.py`` starts
one), each serving the schema registry on an HTTP listener of its own:

- **off**: no topic of this broker turns validation on, so the validator never joins its
  plugins: the produce path is the built-in one alone;
- **id**: ``brokkr.schema.validation.level=id`` (Confluent Server's check: every value
  framed with a schema id registered under ``<topic>-value``);
- **payload**: ``brokkr.schema.validation.level=payload`` (each value also decoded
  against its Avro schema).

and a fourth mode on the ``id`` broker, **off beside**: a topic without the settings on a
broker where another topic validates (what the validator's wrapper costs everyone else).

In each round every mode gets a fresh topic (``confluent.value.schema.validation=true``
for id and payload) and a fresh confluent-kafka producer with ``produce.py``'s settings
(acks=1, linger.ms=5, batch.size=1 MB, no idempotence) sending ``--records`` records after
an untimed warm-up: keys ``key-N`` (unchecked), values framed Avro records made once per
topic by confluent-kafka's ``AvroSerializer`` (which registers the schema through the
broker's registry: ``--distinct`` different values, cycled). Modes take turns in rotating
order over ``--repeat`` rounds; medians are reported, and each mode's ratio to off.
Broker CPU is the broker's process tree over the timed stretch (``produce.CpuMeter``).

Then registry reads: ``GET /schemas/ids/{id}`` ``--reads`` times over one keep-alive
HTTP connection (``http.client``), timed, with the broker's CPU over the same stretch.

    .venv-test/bin/python benchmarks/schema_registry.py [--records 200000] [--repeat 3] [--reads 20000]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from produce import (
    STARTUP_TIMEOUT_S,
    WARMUP_RECORDS,
    CpuMeter,
    create_topic,
    free_port,
    new_producer,
    produce_batch,
    start_broker,
    stop_broker,
)

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "PageView",
        "namespace": "bench",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "at", "type": "long"},
            {"name": "millis", "type": "int"},
            {"name": "referrer", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)
MODES = ("off", "id", "payload", "off beside")
BROKER_OF = {"off": "off", "id": "id", "payload": "payload", "off beside": "id"}


def page_view(i: int) -> dict:
    return {
        "user": f"user-{i % 9973}",
        "page": f"/catalog/item/{i * 7919 % 100_000}",
        "at": 1_700_000_000_000 + i,
        "millis": i % 5000,
        "referrer": None if i % 3 else f"https://example.com/{i % 97}",
        "tags": ["view", "web"] if i % 2 else ["view"],
    }


def framed_values(registry_url: str, topic: str, count: int) -> list[bytes]:
    """``count`` framed Avro values for ``topic``, registering the schema under ``<topic>-value``."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [serializer(page_view(i), ctx) for i in range(count)]


def wait_registry(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=2)
            conn.request("GET", "/subjects")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the registry at {url} did not answer within {STARTUP_TIMEOUT_S:.0f}s")


def run_mode(mode: str, broker: dict, round_no: int, args: argparse.Namespace) -> dict:
    topic = f"bench-{mode.replace(' ', '-')}-{os.getpid()}-{round_no}"
    validating = mode in ("id", "payload")
    create_topic(broker["bootstrap"], topic, {"confluent.value.schema.validation": "true"} if validating else None)
    values = framed_values(broker["registry"], topic, args.distinct)
    producer = new_producer({"bootstrap.servers": broker["bootstrap"]}, args)
    errors: list[str] = []
    produce_batch(producer, topic, WARMUP_RECORDS, values, [], errors)
    meter = CpuMeter(broker["proc"].pid)
    produce_batch(producer, topic, args.records, values, [], errors)
    cpu = meter.stop()
    return {
        "mode": mode,
        "records_per_s": args.records / cpu["seconds"],
        "broker_cpu_pct": cpu["broker_cpu_pct"],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def registry_reads(broker: dict, reads: int) -> dict:
    """``reads`` GETs of one schema by id over one keep-alive connection."""
    schema_id = SchemaRegistryClient({"url": broker["registry"]}).register_schema(
        "bench-reads-value", Schema(SCHEMA, "AVRO")
    )
    host, port = broker["registry"].removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    path = f"/schemas/ids/{schema_id}"
    for _ in range(100):  # warm-up
        conn.request("GET", path)
        conn.getresponse().read()
    meter = CpuMeter(broker["proc"].pid)
    for _ in range(reads):
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status} {body[:200]!r}")
    cpu = meter.stop()
    conn.close()
    return {"reads_per_s": reads / cpu["seconds"], "broker_cpu_pct": cpu["broker_cpu_pct"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="measured records per run (default 200000)")
    parser.add_argument("--distinct", type=int, default=1000, help="distinct values per topic (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported (default 3)")
    parser.add_argument("--reads", type=int, default=20_000, help="registry reads (default 20000)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    args.acks, args.linger_ms, args.batch_size, args.compression = "1", 5, 1_000_000, "none"  # produce.py's

    brokers: dict[str, dict] = {}
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    logs = {name: tempfile.TemporaryFile(mode="w+") for name in ("off", "id", "payload")}
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-schemas-") as data_dir:
        try:
            for name, level in (("off", "id"), ("id", "id"), ("payload", "payload")):
                port, http_port = free_port(), free_port()
                registry = f"http://127.0.0.1:{http_port}"
                proc = start_broker(
                    port,
                    os.path.join(data_dir, name),
                    logs[name],
                    {"brokkr.schema.registry.listeners": registry, "brokkr.schema.validation.level": level},
                )
                brokers[name] = {"proc": proc, "bootstrap": f"127.0.0.1:{port}", "registry": registry}
                wait_registry(registry)
            for r in range(args.repeat):
                shift = r % len(MODES)  # rotating order: no mode always first or last
                for mode in MODES[shift:] + MODES[:shift]:
                    runs[mode].append(run_mode(mode, brokers[BROKER_OF[mode]], r, args))
            reads = registry_reads(brokers["off"], args.reads)
        except (KafkaException, TimeoutError, RuntimeError, OSError) as exc:
            print(f"benchmark failed: {exc!r}", file=sys.stderr)
            return 1
        finally:
            for name, broker in brokers.items():
                stop_broker(broker["proc"])
                logs[name].seek(0)
                text = logs[name].read().strip()
                if text:
                    print(f"--- {name} broker stderr ---\n{text}", file=sys.stderr)

    summary = {}
    for mode, rs in runs.items():
        cpu = [x["broker_cpu_pct"] for x in rs if x["broker_cpu_pct"] is not None]
        summary[mode] = {
            "records_per_s": statistics.median(x["records_per_s"] for x in rs),
            "broker_cpu_pct": statistics.median(cpu) if cpu else None,
            "errors": sum(x["errors"] for x in rs),
        }
    off = summary["off"]["records_per_s"]
    print(
        f"\nschema validation: {args.records} framed Avro values a run, acks=1, linger.ms=5, batch.size=1000000, "
        f"median of {args.repeat} round(s)"
    )
    header = f"{'mode':<12}{'records/s':>12}{'/ off':>8}{'broker CPU':>12}{'errors':>8}"
    print(header + "\n" + "-" * len(header))
    for mode, m in summary.items():
        cpu = "-" if m["broker_cpu_pct"] is None else f"{m['broker_cpu_pct']:.0f}%"
        print(f"{mode:<12}{m['records_per_s']:>12,.0f}{m['records_per_s'] / off:>8.3f}{cpu:>12}{m['errors']:>8}")
    cpu = "-" if reads["broker_cpu_pct"] is None else f"{reads['broker_cpu_pct']:.0f}%"
    print(f"\nregistry reads (GET /schemas/ids/{{id}}, keep-alive): {reads['reads_per_s']:,.0f}/s, broker CPU {cpu}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "runs": runs, "median": summary, "reads": reads}, f, indent=2)
    return 0 if all(m["errors"] == 0 for m in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
