"""The ``brokkr`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .config import parse_overrides, read_properties
from .errors import BrokkrError, ConfigError


def _serve(args: argparse.Namespace) -> int:
    from .broker import Broker

    values: dict[str, str] = {}
    if args.config:
        values.update(read_properties(args.config))
    values.update(parse_overrides(args.override or []))
    broker = Broker(values)
    asyncio.run(broker.serve_forever())
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    from brokkr.plugins.storage.segment.dump import dump_files

    try:
        return dump_files(args.files, sys.stdout, sys.stderr, print_data=args.print_data)
    except BrokenPipeError:  # e.g. piped into head: stop quietly, and keep the exit flush from failing too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brokkr", description="A Kafka-compatible broker, every stage a plugin.")
    parser.add_argument("--log-level", default="INFO", help="Python logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker (defaults: 127.0.0.1:9092, data under ./data)")
    serve.add_argument("config", nargs="?", help="a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="set one setting; repeatable")
    serve.set_defaults(func=_serve)
    dump = sub.add_parser(
        "dump-log", help="print the batches and records of segment files and check their indexes (kafka-dump-log.sh)"
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help=".log, .index, .timeindex or another partition file")
    dump.add_argument("--no-print-data", dest="print_data", action="store_false", help="batches only, not records")
    dump.add_argument("--index-sanity-check", action="store_true", help="accepted for familiarity; always done")
    dump.set_defaults(func=_dump_log)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, BrokkrError, OSError) as exc:
        print(f"brokkr: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
