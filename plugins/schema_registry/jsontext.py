"""Strict, bounded JSON for the AVRO and JSON formats: schema texts and JSON payloads.

Jackson (which Confluent's registry uses) refuses ``NaN``/``Infinity``, and so do we; a
document nested deeper than its limit is refused before any recursive walk sees it, so
that neither our walks nor fastavro's and jsonschema's recursion can be driven past the
stack by an input that is small in bytes.
"""

from __future__ import annotations

import json
from typing import Any

# A schema text nests a level per record, field list, field and type: 128 levels leave
# room for schemas far deeper than real ones while keeping every walk over them shallow.
MAX_SCHEMA_NESTING = 128
# A record's value (a JSON payload, a decoded AVRO value) nests at most this deep.
MAX_VALUE_NESTING = 64


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str | bytes, max_nesting: int) -> Any:
    """Parse ``text`` as JSON; ValueError (with the reason) when it is not JSON, holds
    NaN/Infinity, or nests arrays and objects deeper than ``max_nesting``."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_nesting} levels") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if nesting_exceeds(value, max_nesting):
        raise ValueError(f"nested deeper than {max_nesting} levels")
    return value


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def dumps(value: Any, sort_keys: bool = False) -> str:
    """Compact JSON as Jackson writes it: no spaces, non-ASCII kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
