"""Compatibility levels (Confluent's ``CompatibilityLevel`` and ``SchemaValidatorBuilder``)
over the formats' ``compatibility_errors(reader, writer)``.

BACKWARD: the new schema reads data written with the old (new = reader); FORWARD: the
old reads the new's data; FULL: both. Without ``_TRANSITIVE`` only the latest version is
checked, with it every earlier one, latest first, stopping at the first that fails; NONE
checks nothing. Messages follow Confluent's: the format's, then ``{oldSchemaVersion: V}``
and ``{oldSchema: '...'}``, then ``{validateFields: 'false', compatibility: 'LEVEL'}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .formats import FORMATS, ParsedSchema

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DIFFERENT_TYPE = "Incompatible because of different schema type"
#: Confluent's MAX_SCHEMA_SIZE_FOR_LOGGING: longer old schemas are cut in messages.
SHOWN_SCHEMA_CHARS = 10 * 1024


def level_of(name) -> str | None:
    """The level ``name`` spells (any case), None if it is not one."""
    if not isinstance(name, str):
        return None
    upper = name.upper()
    return upper if upper in LEVELS else None


def _shown(old: ParsedSchema) -> str:
    text = old.canonical()
    if len(text) <= SHOWN_SCHEMA_CHARS:
        return f"{{oldSchema: '{text}'}}"
    return f"{{oldSchema: <truncated> '{text[:SHOWN_SCHEMA_CHARS]}...'}}"


def _check(level: str, new: ParsedSchema, old: ParsedSchema, old_version: int | None) -> list[str]:
    if new.schema_type != old.schema_type:
        return [DIFFERENT_TYPE]
    fmt = FORMATS[new.schema_type]
    errors: list[str] = []
    if level.startswith(("FORWARD", "FULL")):
        errors += fmt.compatibility_errors(old, new)
    if level.startswith(("BACKWARD", "FULL")):
        errors += fmt.compatibility_errors(new, old)
    if errors:
        if old_version is not None:
            errors.append(f"{{oldSchemaVersion: {old_version}}}")
        errors.append(_shown(old))
    return errors


def compatibility_errors(
    level: str, new: ParsedSchema, previous: Sequence[tuple[int | None, ParsedSchema]]
) -> list[str]:
    """[] when ``new`` may follow ``previous`` ((version, schema), oldest first) at ``level``;
    else the messages of the first earlier version it is incompatible with."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    for version, old in reversed(against):
        errors = _check(level, new, old, version)
        if errors:
            return [*errors, f"{{validateFields: 'false', compatibility: '{level}'}}"]
    return []
