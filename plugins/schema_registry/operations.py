"""What the REST API asks of the registry, as Confluent's ``KafkaSchemaRegistry`` does it:
registering, looking up, deleting, compatibility, config and modes.

Writes run at the leader of ``_schemas`` only (the API forwards them there), one at a
time (``registry.write_lock``), on a state caught up with the log; each is one batch of
``_schemas`` records (:meth:`SchemaRegistry.append`). Schemas are parsed on the
registry's threads, never on the event loop.
"""

from __future__ import annotations

import attrs
from brokkr.core.errors import ErrorCode

from . import errors
from .compatibility import compatibility_errors, level_of
from .formats import FORMATS, InvalidSchema, ParsedSchema
from .store import (
    DEFAULT_LEVEL_SETTING,
    Reference,
    RegisteredSchema,
    SchemaRegistry,
    SubjectVersion,
    _json,
    identity,
    schema_key,
    subject_key,
)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = (1 << 31) - 1
#: The default context, as Confluent's messages name it.
CONTEXT = "."


# -- reading requests ----------------------------------------------------------------


def parse_version(text: str) -> int:
    """A version of a path: 1 to 2^31-1, or "latest" (and -1) for the latest (-1)."""
    if text == "latest":
        return -1
    try:
        version = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if version == -1 or 1 <= version <= MAX_VERSION:
        return version
    raise errors.invalid_version(text)


def check_subject(subject: str) -> None:
    """Confluent's ``QualifiedSubject.isValidSubject``: not empty, no control characters."""
    if not subject or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in subject):
        raise errors.invalid_subject(subject)


@attrs.frozen
class Candidate:
    """A schema as a request gives it, parsed."""

    schema_type: str
    schema: str  # as stored: the format's canonical (or normalised) text
    references: tuple[Reference, ...]
    metadata: dict | None
    rule_set: dict | None
    parsed: ParsedSchema
    id: int | None  # IMPORT mode's
    version: int | None

    @property
    def identity(self) -> tuple:
        return identity(self.schema_type, self.schema, self.references, self.metadata, self.rule_set)


def _optional_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value <= MAX_VERSION:
        return value
    raise errors.invalid_schema(f"Invalid {name} {value!r}")


async def candidate(registry: SchemaRegistry, body, normalize: bool, subject: str | None = None) -> Candidate:
    """Read and parse a request's schema (Confluent's RegisterSchemaRequest); 42201 for
    anything that is not a schema of a known type."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str) or not body["schema"]:
        raise errors.invalid_schema("Empty schema")
    schema_type = body.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str) or schema_type.upper() not in FORMATS:
        raise errors.invalid_schema(f"Invalid schema type {schema_type}")
    schema_type = schema_type.upper()
    refs = []
    for ref in body.get("references") or ():
        if not (
            isinstance(ref, dict)
            and isinstance(ref.get("name"), str)
            and isinstance(ref.get("subject"), str)
            and isinstance(ref.get("version"), int)
        ):
            raise errors.invalid_schema(f"Invalid reference {ref!r}")
        refs.append(Reference(ref["name"], ref["subject"], ref["version"]))
    metadata, rule_set = body.get("metadata"), body.get("ruleSet")
    if not isinstance(metadata, (dict, type(None))) or not isinstance(rule_set, (dict, type(None))):
        raise errors.invalid_schema("Invalid metadata or ruleSet: not a JSON object")
    state = registry.state
    if subject is not None and (metadata is None or rule_set is None):  # Confluent's maybePopulateFromPrevious
        latest = state.version(subject, -1)
        if latest is not None and latest.id in state.schemas:
            previous = state.schemas[latest.id]
            metadata = previous.metadata if metadata is None else metadata
            rule_set = previous.rule_set if rule_set is None else rule_set
    try:
        # A reference to "version": -1 is to the latest version, kept as its number.
        resolved = []
        for ref in refs:
            if ref.version == -1:
                sv = state.version(ref.subject, -1)
                if sv is None:
                    raise InvalidSchema(f"Invalid reference {ref.to_json()}: subject {ref.subject} not found")
                ref = attrs.evolve(ref, version=sv.version)
            resolved.append(ref)
        referenced = state.resolve(resolved)
        fmt = FORMATS[schema_type]
        parsed = await registry.run(fmt.parse, body["schema"], referenced)
        text = await registry.run(parsed.normalized if normalize else parsed.canonical)
    except InvalidSchema as exc:
        raise errors.invalid_schema(f"Invalid schema of type {schema_type}, details: {exc}") from None
    return Candidate(
        schema_type,
        text,
        tuple(resolved),
        metadata,
        rule_set,
        parsed,
        _optional_int(body, "id"),
        _optional_int(body, "version"),
    )


def schema_entity(registry: SchemaRegistry, sv: SubjectVersion) -> dict:
    """Confluent's ``Schema``: subject, version, id, and the id's schema."""
    content = registry.state.schemas[sv.id]
    out = {"subject": sv.subject, "version": sv.version, "id": sv.id, **content.to_json()}
    if sv.deleted:
        out["deleted"] = True
    return out


def mode_of(registry: SchemaRegistry, subject: str | None) -> str:
    modes = registry.state.modes
    return modes.get(subject) or modes.get(None) or "READWRITE"


def config_of(registry: SchemaRegistry, subject: str | None) -> dict:
    """The configuration in force for ``subject`` (the global one, then the default level)."""
    configs = registry.state.configs
    merged = {"compatibilityLevel": registry.broker.config[DEFAULT_LEVEL_SETTING].upper()}
    merged.update(configs.get(None, {}))
    if subject is not None:
        merged.update(configs.get(subject, {}))
    return merged


def should_normalize(registry: SchemaRegistry, subject: str, asked: bool) -> bool:
    return asked or bool(config_of(registry, subject).get("normalize"))


async def _parsed(registry: SchemaRegistry, content: RegisteredSchema) -> ParsedSchema:
    try:
        return await registry.run(content.parsed, content.resolved_references())
    except InvalidSchema as exc:
        raise errors.invalid_schema(f"Invalid schema of type {content.schema_type}, details: {exc}") from None


async def check_compatible(
    registry: SchemaRegistry, subject: str, new: ParsedSchema, against: list[SubjectVersion], level: str
) -> list[str]:
    previous = [(sv.version, await _parsed(registry, registry.state.schemas[sv.id])) for sv in against]
    return await registry.run(compatibility_errors, level, new, previous)


def find(registry: SchemaRegistry, subject: str, found: Candidate, deleted: bool = False) -> SubjectVersion | None:
    """The subject's version (latest first) with the candidate's schema."""
    state = registry.state
    schema_id = state.ids.get(found.identity)
    for sv in reversed(state.versions(subject, deleted)):
        if sv.id == schema_id:
            return sv
    return None


# -- writing ---------------------------------------------------------------------------


async def _append(registry: SchemaRegistry, records: list[tuple[bytes, bytes | None]], what: str) -> None:
    error = await registry.append(records)
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        raise errors.schema_too_large()
    if error == ErrorCode.REQUEST_TIMED_OUT:
        raise errors.timed_out(f"Write to the Kafka store timed out while {what}")
    if error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        raise errors.unknown_leader(f"{what.capitalize()} failed: this broker no longer leads the store")
    if error:
        raise errors.store_error(f"Error while {what} in the backend Kafka store ({error.name})")


def _read_only(registry: SchemaRegistry, subject: str) -> bool:
    return mode_of(registry, subject) in ("READONLY", "READONLY_OVERRIDE")


async def register(registry: SchemaRegistry, subject: str, body, normalize: bool) -> dict:
    """POST /subjects/{subject}/versions (Confluent's ``register``)."""
    check_subject(subject)
    normalize = should_normalize(registry, subject, normalize)
    new = await candidate(registry, body, normalize, subject)
    state, mode = registry.state, mode_of(registry, subject)
    if mode in ("READONLY", "READONLY_OVERRIDE"):
        raise errors.not_permitted(f"Subject {subject} in context {CONTEXT} is in read-only mode")
    if new.id is not None and mode != "IMPORT":
        raise errors.not_permitted(f"Subject {subject} in context {CONTEXT} is not in import mode")
    if new.id is None and mode != "READWRITE":
        raise errors.not_permitted(f"Subject {subject} in context {CONTEXT} is not in read-write mode")
    schema_id = state.ids.get(new.identity)
    if schema_id is not None and new.id is not None and new.id != schema_id:
        schema_id = None  # IMPORT of this schema under another id
    if new.version is None:
        existing = find(registry, subject, new)
        if existing is not None and (new.id is None or new.id == existing.id):
            return _registered(registry, existing)
    live = state.versions(subject)
    if mode != "IMPORT" and live:
        level = config_of(registry, subject)["compatibilityLevel"]
        problems = await check_compatible(registry, subject, new.parsed, live, level)
        if problems:
            raise errors.incompatible(subject, problems)
    every = state.versions(subject, deleted=True)
    next_version = every[-1].version + 1 if every else 1
    version = new.version if new.version is not None else next_version
    if version != next_version and mode != "IMPORT":
        raise errors.invalid_schema("Version is not one more than previous version")
    if new.id is not None:
        taken = state.schemas.get(new.id)
        if taken is not None and taken.identity != new.identity:
            raise errors.not_permitted(f"Overwrite new schema with id {new.id} in context {CONTEXT} is not permitted.")
        schema_id = new.id
    elif schema_id is None:
        schema_id = state.max_id + 1
    value = {"subject": subject, "version": version, "id": schema_id}
    value.update(
        RegisteredSchema(schema_id, new.schema_type, new.schema, new.references, new.metadata, new.rule_set).to_json()
    )
    value["deleted"] = False
    await _append(registry, [(schema_key(subject, version), _json(value))], "registering the schema")
    sv = state.version(subject, version)
    if sv is None:  # replayed away: another record won (should not happen at the only writer)
        raise errors.store_error("Error while registering the schema in the backend Kafka store")
    return _registered(registry, sv)


def _registered(registry: SchemaRegistry, sv: SubjectVersion) -> dict:
    """Confluent's RegisterSchemaResponse: the id, the version and the schema stored."""
    return {"id": sv.id, "version": sv.version, **registry.state.schemas[sv.id].to_json()}


async def lookup(registry: SchemaRegistry, subject: str, body, normalize: bool, deleted: bool) -> dict:
    """POST /subjects/{subject}: the version of the subject with this schema."""
    normalize = should_normalize(registry, subject, normalize)
    found = await candidate(registry, body, normalize)
    sv = find(registry, subject, found, deleted)
    if sv is None:
        if not registry.state.versions(subject, deleted):
            raise errors.subject_not_found(subject)
        raise errors.schema_not_found()
    return schema_entity(registry, sv)


async def delete_version(registry: SchemaRegistry, subject: str, version_text: str, permanent: bool) -> int:
    """DELETE /subjects/{subject}/versions/{version} (Confluent's ``deleteSchemaVersion``)."""
    version = parse_version(version_text)
    state = registry.state
    if version != -1 and not permanent:
        sv = state.version(subject, version, deleted=True)
        if sv is not None and sv.deleted:
            raise errors.version_soft_deleted(subject, version)
    sv = state.version(subject, version, deleted=permanent)
    if sv is None:
        if not state.versions(subject, deleted=True):
            raise errors.subject_not_found(subject)
        raise errors.version_not_found(version)
    if _read_only(registry, subject):
        raise errors.not_permitted(f"Subject {subject} in context {CONTEXT} is in read-only mode")
    if state.referenced_by(subject, sv.version, deleted=permanent):
        raise errors.reference_exists(subject, sv.version)
    if permanent and not sv.deleted:
        raise errors.version_not_soft_deleted(subject, sv.version)
    if not permanent:
        value = {"subject": subject, "version": sv.version, "id": sv.id, **state.schemas[sv.id].to_json()}
        value["deleted"] = True
        records = [(schema_key(subject, sv.version), _json(value))]
    else:
        records = [(schema_key(subject, sv.version), None)]
        if len(state.versions(subject, deleted=True)) == 1:  # the last one: its settings go too
            records += _subject_settings_tombstones(registry, subject)
    await _append(registry, records, "deleting the schema version")
    return sv.version


def _subject_settings_tombstones(registry: SchemaRegistry, subject: str) -> list[tuple[bytes, None]]:
    state = registry.state
    return [
        (subject_key(kind, subject), None)
        for kind, kept in (("MODE", state.modes), ("CONFIG", state.configs))
        if subject in kept
    ]


async def delete_subject(registry: SchemaRegistry, subject: str, permanent: bool) -> list[int]:
    """DELETE /subjects/{subject} (Confluent's ``deleteSubject``): soft, every live version
    (one DELETE_SUBJECT record); permanent, every soft-deleted version (tombstones)."""
    state = registry.state
    if not state.versions(subject, deleted=True):
        raise errors.subject_not_found(subject)
    if not permanent and not state.versions(subject):
        raise errors.subject_soft_deleted(subject)
    if _read_only(registry, subject):
        raise errors.not_permitted(f"Subject {subject} in context {CONTEXT} is in read-only mode")
    versions = state.versions(subject, deleted=permanent)
    for sv in versions:
        if any(ref.subject != subject for ref in state.referenced_by(subject, sv.version, deleted=permanent)):
            raise errors.reference_exists(subject, sv.version)
        if permanent and not sv.deleted:
            raise errors.subject_not_soft_deleted(subject)
    if not permanent:
        records = [
            (subject_key("DELETE_SUBJECT", subject), _json({"subject": subject, "version": versions[-1].version}))
        ]
    else:
        records = [(schema_key(subject, sv.version), None) for sv in reversed(versions)]
        records += _subject_settings_tombstones(registry, subject)
    await _append(registry, records, "deleting the subject")
    return [sv.version for sv in versions]


#: The settings a config may hold (Confluent's ConfigUpdateRequest): request name -> stored name.
CONFIG_FIELDS = {
    "compatibility": "compatibilityLevel",
    "compatibilityLevel": "compatibilityLevel",
    "normalize": "normalize",
    "alias": "alias",
    "validateFields": "validateFields",
    "compatibilityGroup": "compatibilityGroup",
    "defaultMetadata": "defaultMetadata",
    "overrideMetadata": "overrideMetadata",
    "defaultRuleSet": "defaultRuleSet",
    "overrideRuleSet": "overrideRuleSet",
}


def config_update_answer(config: dict) -> dict:
    """Confluent's ConfigUpdateRequest: ``compatibility`` for the level, the rest as stored."""
    return {("compatibility" if k == "compatibilityLevel" else k): v for k, v in config.items()}


async def set_config(registry: SchemaRegistry, subject: str | None, body) -> dict:
    """PUT /config[/{subject}]: merged into the config kept (Confluent's ``updateConfig``)."""
    if subject is not None:
        check_subject(subject)
    if not isinstance(body, dict):
        raise errors.invalid_compatibility_level()
    update = {CONFIG_FIELDS[k]: v for k, v in body.items() if k in CONFIG_FIELDS and v is not None}
    if "compatibilityLevel" in update:
        level = level_of(update["compatibilityLevel"])
        if level is None:
            raise errors.invalid_compatibility_level()
        update["compatibilityLevel"] = level
    config = {**registry.state.configs.get(subject, {}), **update}
    value = {"subject": subject, **config} if subject is not None else config
    await _append(registry, [(subject_key("CONFIG", subject), _json(value))], "updating the compatibility level")
    return config_update_answer(config)


async def delete_config(registry: SchemaRegistry, subject: str | None) -> dict:
    """DELETE /config[/{subject}]: the config kept before, now unset."""
    old = registry.state.configs.get(subject)
    if subject is not None and old is None:
        raise errors.subject_not_found(subject)
    if old is not None:
        await _append(registry, [(subject_key("CONFIG", subject), None)], "deleting the compatibility level")
    return old if old is not None else config_of(registry, None)


async def set_mode(registry: SchemaRegistry, subject: str | None, body, force: bool) -> dict:
    """PUT /mode[/{subject}] (Confluent's ``setMode``): IMPORT only where no schema is
    registered yet, unless forced."""
    if subject is not None:
        check_subject(subject)
    mode = body.get("mode") if isinstance(body, dict) else None
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise errors.invalid_mode()
    mode = mode.upper()
    if not registry.broker.config["brokkr.schema.registry.mode.mutability"]:
        raise errors.not_permitted("Mode changes are not allowed")
    state = registry.state
    if mode == "IMPORT" and not force:
        subjects = [subject] if subject is not None else list(state.subjects)
        if any(state.versions(s) for s in subjects):
            raise errors.not_permitted("Cannot import since found existing subjects")
    value = {"subject": subject, "mode": mode} if subject is not None else {"mode": mode}
    await _append(registry, [(subject_key("MODE", subject), _json(value))], "updating the mode")
    return {"mode": mode}


async def delete_mode(registry: SchemaRegistry, subject: str | None) -> dict:
    old = registry.state.modes.get(subject)
    if old is None and subject is not None:
        raise errors.subject_not_found(subject)
    if not registry.broker.config["brokkr.schema.registry.mode.mutability"]:
        raise errors.not_permitted("Mode changes are not allowed")
    if old is not None:
        await _append(registry, [(subject_key("MODE", subject), None)], "deleting the mode")
    return {"mode": old if old is not None else "READWRITE"}


async def test_compatibility(
    registry: SchemaRegistry, subject: str, version_text: str | None, body, normalize: bool, verbose: bool
) -> dict:
    """POST /compatibility/subjects/{subject}/versions[/{version}]: against one version, or
    (without one) against the versions the subject's level checks."""
    state = registry.state
    if version_text is not None:
        version = parse_version(version_text)
        sv = state.version(subject, version)
        if sv is None and version != -1:
            raise errors.version_not_found(version)
        against = [sv] if sv is not None else []
    else:
        against = state.versions(subject)
    level = config_of(registry, subject)["compatibilityLevel"]
    normalize = should_normalize(registry, subject, normalize)
    try:
        new = await candidate(registry, body, normalize)
        problems = await check_compatible(registry, subject, new.parsed, against, level)
    except errors.RegistryError as exc:
        if not verbose or exc.code != 42201:
            raise
        problems = [exc.message]
    answer: dict = {"is_compatible": not problems}
    if verbose:
        answer["messages"] = problems
    return answer
