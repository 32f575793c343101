"""The ``brokkr`` command."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import sys

from .config import parse_overrides, read_properties
from .errors import BrokkrError, ConfigError
from .scram import DEFAULT_ITERATIONS, ScramCredential, ScramCredentials, ScramMechanism, check_iterations

log = logging.getLogger("brokkr.cli")

M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def _keep_large_buffers_mapped() -> None:
    """glibc raises its mmap threshold each time a large block is freed, so that after a
    burst of large requests their buffers come from the heap and stay held when freed. A
    fixed threshold (glibc's mallopt M_MMAP_THRESHOLD) keeps buffers over 256 KiB mapped,
    so the memory a client made the broker hold returns to the system when it goes. Done
    for ``brokkr serve`` only: an embedding program keeps its own allocator settings."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(M_MMAP_THRESHOLD, 256 * 1024)
    except (OSError, AttributeError):  # not glibc
        pass


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings of a ``server.properties`` file (``args.config``), then ``--override`` pairs."""
    values = dict(read_properties(args.config)) if args.config else {}
    values.update(parse_overrides(args.override or []))
    return values


def _loop_factory(choice: str):
    """The event loop ``brokkr serve`` runs on: uvloop (libuv, in C) when it is installed
    (``pip install brokkr[uvloop]``) unless ``--event-loop asyncio``; it takes a fifth or
    more off the per-request cost of the network layer (benchmarks/README.md)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("--event-loop uvloop: uvloop is not installed (pip install 'brokkr[uvloop]')") from None
        return None
    return uvloop.new_event_loop


#: ``brokkr serve``'s threshold for the cyclic garbage collector's youngest generation:
#: the net count of new container objects that starts a collection (CPython's default: 700).
GC_YOUNG_THRESHOLD = 10_000


def _collect_garbage_less_often() -> None:
    """Tune the cyclic garbage collector for a server (the process is the broker's; an
    embedding application keeps its own settings). A Produce to 1,000 partitions holds
    more than 700 new objects at once, so at CPython's threshold each request ran about
    six young collections that moved its live objects on to older generations, and about
    every twentieth a full collection of the whole heap (20-50 ms, the event loop held). At
    10,000 the request's objects are freed before a collection sees them; a young
    collection then takes at most 2-3 ms. What the process holds before serving (modules,
    plugins) is moved out of the collector's sight (``gc.freeze``): it lives as long as
    the process."""
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    gc.collect()
    gc.freeze()


def _serve(args: argparse.Namespace) -> int:
    from .broker import Broker

    _keep_large_buffers_mapped()
    values = _settings(args)
    broker = Broker(values)
    _collect_garbage_less_often()
    loop_factory = _loop_factory(args.event_loop)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        log.info("event loop: %s", "uvloop" if loop_factory else "asyncio")
        runner.run(broker.serve_forever())
    return 0 if broker.clean_shutdown else 1


def _dump_log(args: argparse.Namespace) -> int:
    from brokkr.plugins.storage.segment.dump import dump_files

    try:
        return dump_files(args.files, sys.stdout, sys.stderr, print_data=args.print_data)
    except BrokenPipeError:  # e.g. piped into head: stop quietly, and keep the exit flush from failing too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _scram(args: argparse.Namespace) -> int:
    """Add, remove or list SCRAM users in the log dirs of a broker that has not started yet,
    as ``kafka-storage format --add-scram`` does for Kafka: the first (super) users, whom a
    broker needs before anyone can manage users through it. Once a broker has started on the
    directory, users are managed through the running broker (``brokkr configs --entity-type
    users``, AlterUserScramCredentials): add and remove are refused there, list only reads."""
    from pathlib import Path

    from brokkr.plugins.storage.segment.files import LogDirLock

    from .broker import Broker

    config = Broker(_settings(args)).config
    if config["brokkr.storage"] != "segment":
        raise ConfigError(
            f"brokkr.storage={config['brokkr.storage']}: brokkr scram writes the segment storage's log dirs only "
            "(memory keeps nothing across restarts); add SCRAM users to a running broker with "
            "brokkr configs --entity-type users --alter"
        )
    mechanisms = [ScramMechanism.from_name(name) for name in getattr(args, "mechanism", None) or ()]
    if args.action == "add":
        mechanisms = mechanisms or [ScramMechanism.SCRAM_SHA_256]
        problem = check_iterations(args.iterations)
        if problem:
            raise ConfigError(f"--iterations {args.iterations}: {problem} (4096 to 16384)")
        password = args.password if args.password is not None else _read_password(args.user)
        if not password:
            raise ConfigError("the password must not be empty")
    dirs = [Path(d) for d in config["log.dirs"]]
    if args.action == "add":
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
    locks: list[LogDirLock] = []
    try:
        for d in dirs:
            if d.is_dir():
                locks.append(LogDirLock(d))  # refuses a directory a broker (or tool) holds
        if args.action != "list":
            _refuse_started(dirs, args.user)
        store = ScramCredentials(_LogDirDocuments(dirs[0]))
        if args.action == "add":
            for mechanism in mechanisms:
                store.put(args.user, mechanism, ScramCredential.from_password(mechanism, password, args.iterations))
            store.save()
            names = ", ".join(m.mechanism_name for m in mechanisms)
            print(f"Added {names} credentials for user '{args.user}' ({args.iterations} iterations)")
        elif args.action == "remove":
            removed = [m for m in mechanisms or list(ScramMechanism) if store.remove(args.user, m)]
            if not removed:
                print(f"brokkr: user '{args.user}' has no such SCRAM credentials", file=sys.stderr)
                return 1
            store.save()
            print(f"Removed {', '.join(m.mechanism_name for m in removed)} credentials of user '{args.user}'")
        else:
            for user in store.users():
                creds = sorted(store.of(user).items(), key=lambda i: i[0].type_id)
                described = ", ".join(f"{m.mechanism_name}=iterations={c.iterations}" for m, c in creds)
                print(f"SCRAM credential configs for user-principal '{user}' are {described}")
    finally:
        for lock in locks:
            lock.release()
    return 0


def _refuse_started(dirs, user: str) -> None:
    """Refuse log dirs a broker has started on: their meta.properties or clean shutdown
    marker (written by the broker's storage at its start and stop), or a partition."""
    from brokkr.plugins.storage.segment.files import CLEAN_SHUTDOWN, META_PROPERTIES, parse_partition_dir

    for d in dirs:
        if not d.is_dir():
            continue
        found = next((d / n for n in (META_PROPERTIES, CLEAN_SHUTDOWN) if (d / n).exists()), None)
        found = found or next((p for p in d.iterdir() if p.is_dir() and parse_partition_dir(p.name)), None)
        if found is not None:
            raise ConfigError(
                f"{d} holds a started broker's data ({found.name}): brokkr scram writes users only before a "
                "broker's first start, as kafka-storage format --add-scram. Manage users through the running "
                "broker: brokkr configs --bootstrap-server HOST:PORT --command-config admin.properties "
                f"--entity-type users --entity-name {user} --alter --add-config 'SCRAM-SHA-256=[password=...]'"
            )


class _LogDirDocuments:
    """The segment storage's state documents (``brokkr-{name}.json`` in the first log dir),
    read and written as its ``read_state``/``write_state`` do, without opening the storage
    (which is a broker's start: it writes meta.properties)."""

    def __init__(self, directory):
        self.directory = directory

    def read_state(self, name: str) -> str | None:
        from brokkr.plugins.storage.segment.files import state_file

        path = state_file(self.directory, name)
        return path.read_text() if path.exists() else None

    def write_state(self, name: str, text: str) -> None:
        from brokkr.plugins.storage.segment.files import state_file, write_atomically

        write_atomically(state_file(self.directory, name), text.encode())


def _mirror(args: argparse.Namespace) -> int:
    """Backfill a lake from a log dir (the Spark sink's layout and commit logs), or show how
    far it is behind (``--status``, without Spark)."""
    from brokkr.plugins.sinks.spark import mirror

    tables = mirror.table_settings(args, args.lake)  # None: the parquet format
    if args.status:
        rows = mirror.status(args.log_dir, args.lake, args.commit_dir, args.topic or (), tables)
        print(f"{'TOPIC':<30} {'PARTITION':>9} {'LOG-END-OFFSET':>15} {'MIRRORED-OFFSET':>16} {'LAG':>10}")
        for r in rows:
            print(f"{r.topic:<30} {r.partition:>9} {r.log_end_offset:>15} {r.mirrored_offset:>16} {r.lag:>10}")
        return 0
    from pathlib import Path

    from brokkr.plugins.sinks.spark.sink import check_spark_installed
    from brokkr.plugins.storage.segment.files import LogDirLock

    # A live broker's log dir is its sink's to mirror (its retention may delete what a
    # backfill reads): refused, as a broker refuses it (--status only reads, as dump-log does).
    with LogDirLock(Path(args.log_dir)):
        check_spark_installed("brokkr mirror")
        try:
            from tqdm import tqdm
        except ImportError:
            raise ConfigError("brokkr mirror needs tqdm: pip install 'brokkr[spark]'") from None

        ranges = mirror.log_ranges(args.log_dir, args.topic or ())
        total = sum(r.size for rs in ranges.values() for r in rs)
        conf = dict(parse_overrides(args.conf or []))
        spark = mirror.spark_session(args.master, "brokkr-mirror", conf)
        try:
            if tables is not None:
                m = mirror.TableMirror(spark, tables, args.commit_dir)
            else:
                m = mirror.Mirror(spark, args.lake, args.commit_dir, dict(parse_overrides(args.value_schema or [])))
            with tqdm(total=total, unit="B", unit_scale=True, desc="mirroring", file=sys.stderr) as bar:
                for _ in mirror.backfill(m, args.log_dir, args.topic or (), progress=bar.update):
                    pass
        finally:
            spark.stop()
    for r in mirror.status(args.log_dir, args.lake, args.commit_dir, args.topic or (), tables):
        print(f"{r.topic}-{r.partition}: mirrored up to offset {r.mirrored_offset} (log end {r.log_end_offset})")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    """Every plugin a broker with these settings would load: its name, where it comes from,
    the hooks it implements and the settings it declares, each with the values given for it
    (sensitive ones masked)."""
    from .broker import Broker
    from .config import HIDDEN, is_sensitive
    from .plugins import describe_plugins

    values = _settings(args)
    broker = Broker(values)
    pm, config = broker.pm, broker.config
    for name, plugin, origin, where in describe_plugins(pm):
        if plugin is None:
            print(f"{name}\n  blocked by brokkr.plugins.disabled")
            continue
        print(f"{name} ({origin}) from {where}")
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])
        print(f"  hooks: {', '.join(hooks)}")
        defs = plugin.brokkr_config_definitions() if "brokkr_config_definitions" in hooks else []
        for d in defs:
            default = HIDDEN if d.default is not None and is_sensitive(d.name, d) else repr(d.default)
            kind = "topic setting" if d.topic else "setting"
            print(f"  {kind} {d.name}{'*' if d.prefix else ''} (default {default}): {d.doc}")
            for given in sorted(n for n in config.explicit if n == d.name or (d.prefix and n.startswith(d.name))):
                print(f"    given {given}={config.shown(given, config.explicit[given])}")
    return 0


class _AnyOrderParser(argparse.ArgumentParser):
    """Options and positional arguments in any order, as the README writes ``brokkr scram add
    alice --mechanism SCRAM-SHA-512 server.properties`` (argparse otherwise takes both
    positionals at ``alice`` and leaves ``server.properties`` unrecognized)."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing:  # parse_known_intermixed_args parses in two passes through here
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _read_password(user: str) -> str:
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"Password for user '{user}': ")
    return sys.stdin.readline().rstrip("\r\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brokkr", description="A Kafka-compatible broker, every stage a plugin.")
    parser.add_argument("--log-level", default="INFO", help="Python logging level (default INFO)")
    parser.add_argument("--version", action="version", version=f"brokkr {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker (defaults: 127.0.0.1:9092, data under ./data)")
    serve.add_argument("config", nargs="?", help="a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="set one setting; repeatable")
    serve.add_argument(
        "--event-loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the event loop: uvloop when installed (auto, the default), or asyncio's own",
    )
    serve.set_defaults(func=_serve)
    dump = sub.add_parser(
        "dump-log", help="print the batches and records of segment files and check their indexes (kafka-dump-log.sh)"
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help=".log, .index, .timeindex or another partition file")
    dump.add_argument("--no-print-data", dest="print_data", action="store_false", help="batches only, not records")
    dump.add_argument("--index-sanity-check", action="store_true", help="accepted for familiarity; always done")
    dump.set_defaults(func=_dump_log)
    scram = sub.add_parser(
        "scram",
        help="add the first SCRAM users to log.dirs before a broker's first start (kafka-storage format --add-scram)",
    )
    scram_actions = scram.add_subparsers(dest="action", required=True, parser_class=_AnyOrderParser)
    mechanism_names = [m.mechanism_name for m in ScramMechanism]
    for action, text in (
        ("add", "add or replace a user's credentials (salted: the password itself is not kept)"),
        ("remove", "remove a user's credentials (all mechanisms unless --mechanism)"),
        ("list", "list users, their mechanisms and iteration counts"),
    ):
        p = scram_actions.add_parser(action, help=text)
        if action != "list":
            p.add_argument("user", help="the user name (the principal is User:<name>)")
            p.add_argument(
                "--mechanism",
                action="append",
                choices=mechanism_names,
                help="repeatable; add defaults to SCRAM-SHA-256",
            )
        if action == "add":
            p.add_argument("--password", help="the password (default: asked for, or read from standard input)")
            p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help="4096 to 16384 (default 4096)")
        p.add_argument("config", nargs="?", help="the broker's server.properties (for log.dirs)")
        p.add_argument("--override", action="append", metavar="KEY=VALUE", help="set one setting; repeatable")
    scram.set_defaults(func=_scram)
    mirror = sub.add_parser(
        "mirror", help="mirror a log dir into a lake of Parquet files through Spark (backfill), or --status"
    )
    mirror.add_argument("--log-dir", required=True, help="a log dir of the segment storage")
    mirror.add_argument("--lake", required=True, help="the lake: a directory or a URI Spark writes")
    mirror.add_argument("--commit-dir", help="the commit logs' local directory (default <lake>/_brokkr_commits)")
    mirror.add_argument("--topic", action="append", help="only this topic; repeatable (default: all)")
    mirror.add_argument("--master", default="local[*]", help="the Spark master (default local[*])")
    mirror.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark setting; repeatable")
    mirror.add_argument(
        "--value-schema", action="append", metavar="TOPIC=DDL", help="typed columns from JSON values; repeatable"
    )
    mirror.add_argument("--status", action="store_true", help="per partition: log end, mirrored offset and lag")
    from brokkr.plugins.sinks.spark.mirror import add_table_options

    add_table_options(mirror)  # --format iceberg|delta and the table settings
    mirror.set_defaults(func=_mirror)
    _add_admin_tools(sub)
    plugins = sub.add_parser("plugins", help="list the plugins a broker would load: hooks and settings of each")
    plugins.add_argument("config", nargs="?", help="a server.properties file (brokkr.plugins.disabled applies)")
    plugins.add_argument("--override", action="append", metavar="KEY=VALUE", help="set one setting; repeatable")
    plugins.set_defaults(func=_plugins)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, BrokkrError, OSError) as exc:
        print(f"brokkr: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)  # 1 for a log dir another process holds, as Kafka exits
    except KeyboardInterrupt:
        return 130


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("brokkr")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _add_admin_tools(sub) -> None:
    """``brokkr topics``, ``brokkr configs`` (brokkr.core.tools) and ``brokkr consumer-groups``
    (brokkr.core.group_tool), modelled on Kafka's tools; ``brokkr schemas``
    (brokkr.core.schema_tool), a schema registry's REST API."""
    from . import client_config, tools

    topics = sub.add_parser("topics", help="create, list, describe, alter or delete topics of a running broker")
    topics.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    client_config.add_argument(topics)
    action = topics.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create --topic")
    action.add_argument("--list", action="store_true", help="list the topic names")
    action.add_argument(
        "--describe", action="store_true", help="partitions and non-default configs (of --topic, or all)"
    )
    action.add_argument("--alter", action="store_true", help="grow --topic to --partitions partitions")
    action.add_argument("--delete", action="store_true", help="delete --topic")
    topics.add_argument("--topic", help="the topic")
    topics.add_argument("--partitions", type=int, help="partition count (create: default num.partitions)")
    topics.add_argument("--replication-factor", type=int, help="with --create (alone, a broker keeps one)")
    topics.add_argument("--config", action="append", metavar="KEY=VALUE", help="with --create; repeatable")
    topics.set_defaults(func=tools.topics)

    configs = sub.add_parser(
        "configs",
        help="describe or alter the configs of topics, brokers and groups, users' SCRAM credentials, client quotas",
    )
    configs.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    client_config.add_argument(configs)
    configs.add_argument(
        "--entity-type",
        required=True,
        action="append",
        choices=("topics", "brokers", "groups", "users", "clients"),
        help="what to describe or alter; users and clients both: a user's quotas for a client id",
    )
    configs.add_argument(
        "--entity-name", action="append", dest="entity_names", help="the topic, broker id, group, user or client id"
    )
    configs.add_argument(
        "--entity-default",
        action="append_const",
        const="",
        dest="entity_names",
        help="the cluster-wide broker default; the default user or client id (quotas)",
    )
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="the configs set (all of them with --all)")
    action.add_argument("--alter", action="store_true", help="apply --add-config and --delete-config")
    configs.add_argument("--all", action="store_true", help="with --describe: defaults too")
    configs.add_argument("--add-config", action="append", metavar="K=V,K2=[A,B]", help="settings to set")
    configs.add_argument("--delete-config", action="append", metavar="K,K2", help="settings to return to default")
    configs.set_defaults(func=tools.configs)

    from . import group_tool

    groups = sub.add_parser(
        "consumer-groups", help="list, describe, reset offsets of or delete consumer groups (kafka-consumer-groups.sh)"
    )
    groups.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker to talk to")
    client_config.add_argument(groups)
    action = groups.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="the groups (with --state/--type: those, in columns)")
    action.add_argument("--describe", action="store_true", help="offsets and lag per partition (or --members, --state)")
    action.add_argument(
        "--reset-offsets", action="store_true", help="set the group's offsets (a dry run unless --execute)"
    )
    action.add_argument("--delete", action="store_true", help="delete the groups (they must be empty)")
    action.add_argument("--delete-offsets", action="store_true", help="delete the group's offsets of --topic")
    groups.add_argument("--group", action="append", help="the group (repeatable)")
    groups.add_argument("--all-groups", action="store_true", help="every group")
    groups.add_argument("--members", action="store_true", help="with --describe: the members")
    groups.add_argument("--verbose", action="store_true", help="with --members: their assignments")
    groups.add_argument(
        "--state", nargs="?", const="", help="with --describe: the group's state; with --list: filter by states (A,B)"
    )
    groups.add_argument("--type", nargs="?", const="", help="with --list: filter by types (classic,consumer)")
    groups.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="topic (and partitions) to reset")
    groups.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = groups.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    to.add_argument("--shift-by", type=int)
    run = groups.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    groups.set_defaults(func=group_tool.consumer_groups)

    from . import acl_tool, reassign_tool, schema_tool, share_group_tool

    share_group_tool.add_parser(sub)  # share-groups (kafka-share-groups.sh)
    schema_tool.add_parser(sub)
    acl_tool.add_parser(sub)
    reassign_tool.add_parser(sub)  # reassign-partitions and leader-election
    from . import console_consumer, console_producer

    console_producer.add_parser(sub)
    console_consumer.add_parser(sub)


if __name__ == "__main__":
    sys.exit(main())
