"""The cost of authorization and quota accounting on produce throughput: ACLs and quotas
on against off, in the same run.

Three brokkr brokers run as subprocesses, side by side (as in ``produce.py``), the
example plugins of ``examples/`` disabled in all three:

- **bare**: the ACL and quota plugins disabled: the allow-all authorizer and no quota
  plugin but the no-op default (what brokkr was before either existed, except the
  request timing in ``dispatch.py``);
- **off**: the defaults: ACL plugin present but not selected, quota plugin present with
  no quota set (each then returns at its first check);
- **on**: ``authorizer.class.name=acl`` with ``--acls`` ACLs (LITERAL ones on other
  topics, PREFIXED ones of many lengths, some of them prefixes of the topics written, for
  other principals), this client allowed by a PREFIXED ACL, and quotas that apply to it
  without ever throttling: a ``producer_byte_rate`` and a ``request_percentage`` on its
  client id and a ``<default>`` user quota, so every request is recorded against two rates.

For each batch size this process sends the same Produce request ``--requests`` times over
one raw connection, ``--in-flight`` at a time, to each broker in turn (``--repeat`` times,
with fresh broker processes each time and the modes in rotating order; medians reported),
so what is measured is the broker's produce path, request bytes to response bytes,
without a client library. The ratio on/off is what authorization and quota accounting
cost; off/bare is what having the plugins installed costs when they are not used.

In the same run, and more precisely, this process measures the time of one Produce
request through ``dispatch`` (decode, authorize, validate, append, quotas, encode) with
one in-process broker per mode, the modes taking turns; and the calls the 'on' mode adds
in isolation (``AclAuthorizer.authorize`` with one action, ``ClientQuotaManager.record``).

    /work/venv/bin/python benchmarks/security.py [--requests 2000] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import timeit

from brokkr.core.authorization import AclBinding, AclOperation, AclPermissionType, Action, PatternType, ResourceType
from brokkr.core.broker import Broker
from brokkr.core.context import ANONYMOUS, ConnectionInfo, RequestContext
from brokkr.core.dispatch import handle_frame_with_throttle
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.auth.acl import AclAuthorizer
from brokkr.plugins.quota.client_quotas import ClientQuotaManager
from brokkr.plugins.storage.memory import MemoryStorage
from confluent_kafka import KafkaException
from confluent_kafka import admin as ck
from confluent_kafka.admin import AdminClient
from produce import create_topic, free_port, installed_plugins, start_broker, stop_broker
from raw_produce import produce_frame, timed_run

CLIENT_ID = "brokkr-bench"
TOPIC_PREFIX = "bench-"
ALTER_QUOTAS = 49
QUOTAS = {  # entity -> settings, large enough never to throttle
    (("client-id", CLIENT_ID),): {"producer_byte_rate": 1e12, "request_percentage": 1e6},
    (("user", None),): {"producer_byte_rate": 1e12},
}


def bench_acls(count: int) -> list[AclBinding]:
    """``count`` ACLs for other principals: three in four LITERAL on other topics, the rest
    PREFIXED, half of them prefixes of the benchmark's topic names (found, then skipped
    for their principal) and half on other topics with prefixes of many lengths; then the
    two that let User:ANONYMOUS do what the benchmark does."""
    allow, write = AclPermissionType.ALLOW, AclOperation.WRITE
    acls = []
    for i in range(count):
        if i % 4:
            name, pattern = f"other-{i}", PatternType.LITERAL
        elif i % 8:
            name, pattern = TOPIC_PREFIX[: 1 + (i // 8) % len(TOPIC_PREFIX)], PatternType.PREFIXED
        else:
            name, pattern = "zz" + "z" * (i % 37) + "-", PatternType.PREFIXED
        acls.append(AclBinding(ResourceType.TOPIC, name, pattern, f"User:u{i}", "*", write, allow))
    me = "User:ANONYMOUS"
    acls.append(AclBinding(ResourceType.TOPIC, TOPIC_PREFIX, PatternType.PREFIXED, me, "*", write, allow))
    acls.append(
        AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, me, "*", AclOperation.ALL, allow)
    )
    return acls


def secure(bootstrap: str, acls: list[AclBinding]) -> None:
    """Create the 'on' broker's ACLs (with confluent-kafka's AdminClient; the broker starts
    with allow.everyone.if.no.acl.found, and the cluster ACL created keeps this client
    allowed) and its quotas (AlterClientQuotas, which no Python admin client offers)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    bindings = [
        ck.AclBinding(  # the same numbers as Kafka's (confluent-kafka calls CLUSTER "BROKER")
            ck.ResourceType(a.resource_type),
            a.resource_name,
            ck.ResourcePatternType(a.pattern_type),
            a.principal,
            a.host,
            ck.AclOperation(a.operation),
            ck.AclPermissionType(a.permission_type),
        )
        for a in acls
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(30)
    spec = request_spec(ALTER_QUOTAS)
    entries = [
        spec.struct("EntryData")(
            entity=[spec.struct("EntityData")(entity_type=t, entity_name=n) for t, n in entity],
            ops=[spec.struct("OpData")(key=key, value=value, remove=False) for key, value in settings.items()],
        )
        for entity, settings in QUOTAS.items()
    ]
    with RawClient(bootstrap) as client:
        answer = client.request(ALTER_QUOTAS, 1, spec.cls(entries=entries))
        if any(e.error_code for e in answer.entries):
            raise RuntimeError(f"AlterClientQuotas failed: {[e.error_message for e in answer.entries]}")


def run(bootstrap: str, pid: int, frame: bytes, args, records: int) -> dict:
    elapsed, cpu = timed_run(bootstrap, pid, frame, args.warmup, args.requests, args.in_flight)
    return {
        "requests_per_s": args.requests / elapsed,
        "mb_per_s": args.requests * records * args.value_size / elapsed / 1e6,
        "broker_cpu_pct": cpu,
    }


def in_process(args, acls: list[AclBinding], frames: dict[int, bytes]) -> dict[tuple[int, str], list[float]]:
    """Microseconds per Produce request through ``dispatch`` (decode, authorize, validate,
    append, quotas, encode) in this process, one broker per mode on one event loop, the
    modes taking turns request by request: the figure with the least noise."""

    async def measure() -> dict[tuple[int, str], list[float]]:
        conn = ConnectionInfo("bench-0", "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 50000)
        brokers = {}
        with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
            try:
                for mode, overrides in MODES.items():
                    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": f"{data_dir}/{mode}", **overrides}
                    brokers[mode] = Broker(config)
                    await brokers[mode].start()
                    for n in frames:
                        brokers[mode].create_topic(f"{TOPIC_PREFIX}{n}")
                on = brokers["on"]
                on.hook.brokkr_acl_store(broker=on).create_acls(acls)
                on.hook.brokkr_client_quota_store(broker=on).alter(QUOTAS)
                samples: dict[tuple[int, str], list[float]] = {(n, m): [] for n in frames for m in MODES}
                orders = [list(MODES)[i:] + list(MODES)[:i] for i in range(len(MODES))]
                clock = time.perf_counter
                for n, frame in frames.items():
                    body = frame[4:]  # without the size prefix
                    for _ in range(args.repeat):
                        # request by request, the modes taking turns: load from elsewhere hits all alike
                        spent = dict.fromkeys(MODES, 0.0)
                        for i in range(args.requests):
                            for mode in orders[i % len(orders)]:
                                start = clock()
                                await handle_frame_with_throttle(brokers[mode], conn, ANONYMOUS, body)
                                spent[mode] += clock() - start
                        for mode, seconds in spent.items():
                            samples[n, mode].append(seconds / args.requests * 1e6)
            finally:
                for broker in brokers.values():
                    await broker.stop()
        return samples

    return asyncio.run(measure())


def per_call_costs(acls: list[AclBinding]) -> dict[str, float]:
    """Microseconds per call of what the 'on' broker adds to each Produce request."""

    authorizer = AclAuthorizer(MemoryStorage({}), frozenset(), False)
    authorizer.create_acls(acls)
    conn = ConnectionInfo("bench-0", "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 50000)
    ctx = RequestContext(conn, ANONYMOUS, 0, 9, CLIENT_ID, 1)
    actions = [Action(AclOperation.WRITE, ResourceType.TOPIC, f"{TOPIC_PREFIX}0")]
    assert authorizer.authorize(ctx, actions)[0].value == "ALLOWED"
    quotas = ClientQuotaManager(MemoryStorage({}), 11, 1000)
    quotas.alter(QUOTAS)
    costs = {}
    for label, call in (
        ("authorize (1 action)", lambda: authorizer.authorize(ctx, actions)),
        ("quota record (produce)", lambda: quotas.record("produce", "ANONYMOUS", CLIENT_ID, 1000)),
        ("quota record (request)", lambda: quotas.record("request", "ANONYMOUS", CLIENT_ID, 0.05)),
    ):
        n = 20000
        costs[label] = min(timeit.repeat(call, number=n, repeat=5)) / n * 1e6
    return costs


def end_to_end(args, acls, frames: dict[int, bytes], runs: dict, rotation: int) -> str | None:
    """Start one broker per mode, secure the 'on' one, and add one run per batch size and
    mode to ``runs`` (modes in rotated order); the failure, if any."""
    logs = {mode: tempfile.TemporaryFile(mode="w+") for mode in MODES}
    brokers = {}
    modes = list(MODES)[rotation % len(MODES) :] + list(MODES)[: rotation % len(MODES)]
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
        try:
            ports = {mode: free_port() for mode in MODES}
            for mode, overrides in MODES.items():
                brokers[mode] = start_broker(ports[mode], f"{data_dir}/{mode}", logs[mode], overrides)
            bootstrap = {mode: f"127.0.0.1:{port}" for mode, port in ports.items()}
            secure(bootstrap["on"], acls)
            for n in frames:
                for mode in MODES:
                    create_topic(bootstrap[mode], f"{TOPIC_PREFIX}{n}")
            for n, frame in frames.items():
                for mode in modes:
                    runs[n, mode].append(run(bootstrap[mode], brokers[mode].pid, frame, args, n))
        except (RuntimeError, TimeoutError, OSError, KafkaException) as exc:
            return str(exc)
        finally:
            for mode, proc in brokers.items():
                stop_broker(proc)
                logs[mode].seek(0)
                stderr = logs[mode].read().strip()
                if stderr:
                    print(f"--- broker '{mode}' stderr ---\n{stderr}", file=sys.stderr)
    return None


# start_broker blocks the entry-point plugins installed beside brokkr (the dev setup's
# examples); "bare" blocks the built-in authorizer and quota plugins as well.
BARE = ",".join(filter(None, [installed_plugins(), "brokkr.plugins.auth.acl", "brokkr.plugins.quota.client_quotas"]))
MODES = {
    "bare": {"brokkr.plugins.disabled": BARE},
    "off": {},
    "on": {
        "authorizer.class.name": "acl",
        "allow.everyone.if.no.acl.found": "true",  # so that the first CreateAcls may; its cluster ACL then allows
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--batches",
        default="1,100,1000",
        help="records per Produce request, comma-separated cases (default 1,100,1000)",
    )
    parser.add_argument("--value-size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per case and run (default 2000)")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests first (default 100)")
    parser.add_argument("--in-flight", type=int, default=8, help="unanswered requests at a time (default 8)")
    parser.add_argument("--acls", type=int, default=200, help="ACLs on other resources in the 'on' broker (200)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case and mode, medians (default 5)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batches.split(",")]
    acls = bench_acls(args.acls)

    runs: dict[tuple[int, str], list[dict]] = {(n, mode): [] for n in sizes for mode in MODES}
    frames = {}
    for n in sizes:
        records = [(b"key-%d" % i, b"v" * args.value_size) for i in range(n)]
        frames[n] = produce_frame(
            f"{TOPIC_PREFIX}{n}", build_batch(records, timestamp=int(time.time() * 1000)), CLIENT_ID
        )
    for repeat in range(args.repeat):
        # Fresh broker processes each time: two processes of one configuration differ by up to
        # ~10% on a shared VM, so a mode must not keep one process's luck for the whole run.
        error = end_to_end(args, acls, frames, runs, rotation=repeat)
        if error:
            print(f"benchmark failed: {error}", file=sys.stderr)
            return 1

    summary = {}
    for (n, mode), rs in runs.items():
        cpu = [r["broker_cpu_pct"] for r in rs if r["broker_cpu_pct"] is not None]
        summary[n, mode] = {
            "requests_per_s": statistics.median(r["requests_per_s"] for r in rs),
            "mb_per_s": statistics.median(r["mb_per_s"] for r in rs),
            "broker_cpu_pct": statistics.median(cpu) if cpu else None,
        }
    # Paired: each ratio within one set of broker processes, then the median over the sets.
    ratios = {
        n: {
            f"{a}/{b}": statistics.median(
                x["requests_per_s"] / y["requests_per_s"] for x, y in zip(runs[n, a], runs[n, b])
            )
            for a, b in (("on", "off"), ("off", "bare"), ("on", "bare"))
        }
        for n in sizes
    }
    per_request = in_process(args, acls, frames)
    costs = per_call_costs(acls)
    print_table(summary, ratios, sizes, costs, args)
    print_in_process(per_request, sizes, args)
    if args.json:
        doc = {
            "config": vars(args),
            "runs": {f"{n} {mode}": rs for (n, mode), rs in runs.items()},
            "median": {f"{n} {mode}": m for (n, mode), m in summary.items()},
            "ratios": {str(n): r for n, r in ratios.items()},
            "per_call_us": costs,
            "in_process_us_per_request": {f"{n} {mode}": runs_us for (n, mode), runs_us in per_request.items()},
        }
        with open(args.json, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
    return 0


def print_table(summary: dict, ratios: dict, sizes: list[int], costs: dict, args) -> None:
    print(
        f"\nsecurity: Produce v9 requests of N records x {args.value_size} B, {args.requests} per run, "
        f"{args.in_flight} in flight, acks=1, median of {args.repeat} run(s) (ratios: median of the runs' ratios)\n"
        f"on = ACL authorizer ({args.acls + 2} ACLs) + produce and request quotas; off = defaults; "
        "bare = ACL and quota plugins disabled"
    )
    header = f"{'records/req':<12}" + "".join(f"{m + ' req/s':>12}" for m in MODES)
    header += "".join(f"{r:>10}" for r in ratios[sizes[0]]) + "".join(f"{m + ' CPU':>10}" for m in MODES)
    print(header)
    print("-" * len(header))
    for n in sizes:
        line = f"{n:<12}" + "".join(f"{summary[n, m]['requests_per_s']:>12,.0f}" for m in MODES)
        line += "".join(f"{r:>10.3f}" for r in ratios[n].values())
        for m in MODES:
            cpu = summary[n, m]["broker_cpu_pct"]
            line += f"{'-' if cpu is None else f'{cpu:.0f}%':>10}"
        print(line)
    print("\nper call, in this process (microseconds):")
    for label, us in costs.items():
        print(f"  {label:<26}{us:>8.2f}")


def print_in_process(per_request: dict, sizes: list[int], args) -> None:
    print(f"\nper Produce request through dispatch, in this process (microseconds, median of {args.repeat}):")
    header = f"{'records/req':<12}" + "".join(f"{m:>10}" for m in MODES) + f"{'on/off':>10}{'off/bare':>10}"
    print(header)
    print("-" * len(header))
    for n in sizes:
        us = {m: statistics.median(per_request[n, m]) for m in MODES}
        line = f"{n:<12}" + "".join(f"{v:>10.1f}" for v in us.values())
        for a, b in (("on", "off"), ("off", "bare")):  # paired, as for the end-to-end ratios
            line += f"{statistics.median(x / y for x, y in zip(per_request[n, a], per_request[n, b])):>10.3f}"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
