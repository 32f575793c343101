"""The ``brokkr`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brokkr", description="A Kafka-compatible broker, every stage a plugin.")
    parser.add_argument("--log-level", default="INFO", help="Python logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker (defaults: 127.0.0.1:9092, data under ./data)")
    serve.add_argument("config", nargs="?", help="a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="set one setting; repeatable")
    serve.set_defaults(func=_serve)
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
