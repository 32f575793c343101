"""The JSON format (JSON Schema) of the schema registry (issue 36), as Confluent's
JsonSchema behaves.

- ``parse``: the schema (an object or a boolean) checked against its draft's metaschema
  with jsonschema: draft 4, 6, 7 (the default, as Confluent's), 2019-09 or 2020-12 as its
  ``$schema`` says. The referenced schemas are registered under their reference names (and
  those names resolved against the schema's ``$id``), so ``{"$ref": "other.json"}`` or
  ``"other.json#/definitions/x"`` finds them; nothing is fetched from the network.
- ``canonical()``: Confluent's: the JSON written compactly, keys in their order;
  ``normalized()``: the same with every object's keys sorted.
- ``compatibility_errors(reader, writer)``: Confluent's JSON Schema diff (its SchemaDiff
  and the Difference types of its "Schema Evolution and Compatibility" docs): the writer's
  schema is the original, the reader's the update; every difference outside Confluent's
  strict compatible set is reported in Confluent's message form, "reader"/"writer" naming
  the schemas. Schemas are modelled the way everit (Confluent's loader) reads them: a
  ``type`` list is an anyOf; keywords of several kinds next to each other an allOf.
  Covered: types, integer/number, string lengths and pattern, number limits and
  multipleOf, enum, const, properties and required (open, closed and partially open
  content models), additionalProperties, dependencies, min/maxProperties, items (also
  tuples and 2020-12's prefixItems), additionalItems, min/maxItems, uniqueItems,
  min/maxContains, unevaluated*, allOf/anyOf/oneOf (with Confluent's subschema matching),
  not, $ref (recursive schemas too). Left out: if/then/else, propertyNames, contains'
  schema and format, which Confluent does not compare either, and its LENIENT policy.
- ``validate(payload)``: the payload parsed as JSON (bounded nesting) and validated with
  jsonschema, formats checked; ``pattern``, ``patternProperties`` and
  ``additionalProperties`` match with RE2 (linear time) where it reads the pattern, and
  ``uniqueItems`` takes linear time, so a payload cannot make them slow.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urljoin

import jsonschema
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import ValidationError, validators

from . import jsontext
from .formats import InvalidPayload, InvalidSchema

_DRAFTS = {
    cls.META_SCHEMA["$schema"].rstrip("#"): cls
    for cls in (
        validators.Draft4Validator,
        validators.Draft6Validator,
        validators.Draft7Validator,
        validators.Draft201909Validator,
        validators.Draft202012Validator,
    )
}
_DEFAULT_DRAFT = validators.Draft7Validator
# Work one compatibility check may do: pairs of (sub)schemas compared.
MAX_PAIRS = 100_000
_NO_DEFAULT = object()


# -- the model: schemas as everit reads them --------------------------------------------


class _Node:
    """One (sub)schema. ``kind``: true, empty, false, string, number, boolean, null,
    object, array, enum, const, not, combined or ref; the keywords as attributes."""

    def __init__(self, kind: str, raw: Any) -> None:
        self.kind = kind
        self.raw = raw
        self.id = self.title = self.description = None
        self.default: Any = _NO_DEFAULT
        self.attrs: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return self.attrs.get(name)

    @property
    def key(self) -> tuple[str, str]:
        """What Confluent's set of subschemas tells apart."""
        return self.kind, jsontext.dumps(self.raw, sort_keys=True)

    @property
    def is_empty(self) -> bool:  # everit's EmptySchema (TrueSchema extends it)
        return self.kind in ("empty", "true")


def _keywords(draft: int) -> tuple[set[str], set[str]]:
    """everit's object and array keywords, by which a schema without ``type`` is typed."""
    objects = {"properties", "required", "minProperties", "maxProperties", "dependencies",
               "patternProperties", "additionalProperties"}  # fmt: skip
    arrays = {"items", "additionalItems", "minItems", "maxItems", "uniqueItems"}
    if draft >= 6:
        objects.add("propertyNames")
        arrays.add("contains")
    if draft >= 2019:
        objects |= {"dependentRequired", "dependentSchemas", "unevaluatedProperties"}
        arrays |= {"unevaluatedItems", "minContains", "maxContains", "prefixItems"}
    return objects, arrays


_NUMBER_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_STRING_KEYWORDS = {"minLength", "maxLength", "pattern", "format"}


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class _Loader:
    """Builds the _Node graph of a schema; a ``$ref`` is looked up when it is loaded (so
    an unresolvable one fails the parse) and its target built when first compared."""

    def __init__(self, draft: int) -> None:
        self.draft = draft
        self.object_keywords, self.array_keywords = _keywords(draft)
        self.built: dict[int, _Node] = {}

    def load(self, js: Any, resolver: referencing.Resolver) -> _Node:
        if isinstance(js, bool):
            return _Node("true" if js else "false", js)
        if not isinstance(js, dict):
            raise InvalidSchema(f"Invalid JSON schema: a schema is an object or a boolean, not {jsontext.dumps(js)}")
        found = self.built.get(id(js))
        if found is not None:
            return found
        id_keyword = "id" if self.draft == 4 else "$id"
        if isinstance(js.get(id_keyword), str):
            resolver = resolver.in_subresource(
                referencing.jsonschema.specification_with(_META[self.draft]).create_resource(js)
            )
        parts = self._parts(js, resolver)
        if not parts:
            node = _Node("empty", js)
        elif len(parts) == 1:
            node = parts[0]
        else:
            node = self._combined("allOf", parts, js)
        self.built[id(js)] = node
        if isinstance(js.get(id_keyword), str):
            node.id = js[id_keyword]
        node.title = js.get("title") if isinstance(js.get("title"), str) else None
        node.description = js.get("description") if isinstance(js.get("description"), str) else None
        if "default" in js:
            node.default = js["default"]
        node.attrs["connect_type"] = js.get("connect.type")
        return node

    def _combined(self, criterion: str, subschemas: list[_Node], raw: Any) -> _Node:
        node = _Node("combined", raw)
        node.attrs.update(criterion=criterion, subschemas=subschemas)
        return node

    def _parts(self, js: dict, resolver: referencing.Resolver) -> list[_Node]:
        parts = []
        if "enum" in js and isinstance(js["enum"], list):
            node = _Node("enum", js["enum"])
            node.attrs["values"] = {jsontext.dumps(value, sort_keys=True) for value in js["enum"]}
            parts.append(node)
        if "const" in js and self.draft != 4:
            node = _Node("const", {"const": js["const"]})
            node.attrs["value"] = jsontext.dumps(js["const"], sort_keys=True)
            parts.append(node)
        for criterion in ("allOf", "anyOf", "oneOf"):
            if isinstance(js.get(criterion), list):
                subschemas = [self.load(sub, resolver) for sub in js[criterion]]
                parts.append(self._combined(criterion, subschemas, {criterion: js[criterion]}))
        if "not" in js:
            node = _Node("not", {"not": js["not"]})
            node.attrs["schema"] = self.load(js["not"], resolver)
            parts.append(node)
        kind = js.get("type")
        if isinstance(kind, str):
            parts.append(self._typed(kind, js, resolver))
        elif isinstance(kind, list):
            typed = [self._typed(one, js, resolver) for one in kind if isinstance(one, str)]
            parts.append(self._combined("anyOf", typed, {"type": kind}))
        else:
            if js.keys() & self.array_keywords:
                parts.append(self._typed("array", js, resolver))
            if js.keys() & self.object_keywords:
                parts.append(self._typed("object", js, resolver))
            if js.keys() & _NUMBER_KEYWORDS:
                parts.append(self._typed("number", js, resolver))
            if js.keys() & _STRING_KEYWORDS:
                parts.append(self._typed("string", js, resolver))
        if isinstance(js.get("$ref"), str):
            parts.append(self._ref(js, resolver))
        return parts

    def _ref(self, js: dict, resolver: referencing.Resolver) -> _Node:
        try:
            resolved = resolver.lookup(js["$ref"])
        except referencing.exceptions.Unresolvable as exc:
            raise InvalidSchema(f"Invalid JSON schema: $ref {js['$ref']!r} does not resolve: {exc}") from None
        node = _Node("ref", {"$ref": js["$ref"]})
        node.attrs.update(contents=resolved.contents, resolver=resolved.resolver, loader=self)
        return node

    def _typed(self, kind: str, js: dict, resolver: referencing.Resolver) -> _Node:
        if kind in ("boolean", "null"):
            return _Node(kind, {"type": kind})
        if kind in ("number", "integer"):
            return self._number(js, kind == "integer")
        if kind == "string":
            node = _Node("string", {key: js[key] for key in _STRING_KEYWORDS & js.keys()} | {"type": "string"})
            node.attrs.update(
                min_length=_number(js.get("minLength")), max_length=_number(js.get("maxLength")),
                pattern=js.get("pattern") if isinstance(js.get("pattern"), str) else None,
            )  # fmt: skip
            return node
        if kind == "object":
            return self._object(js, resolver)
        if kind == "array":
            return self._array(js, resolver)
        raise InvalidSchema(f"Invalid JSON schema: unknown type: [{kind}]")

    def _number(self, js: dict, integer: bool) -> _Node:
        node = _Node("number", {key: js[key] for key in _NUMBER_KEYWORDS & js.keys()} | {"integer": integer})
        node.attrs.update(
            minimum=_number(js.get("minimum")), maximum=_number(js.get("maximum")),
            multiple_of=_number(js.get("multipleOf")), integer=integer,
        )  # fmt: skip
        if self.draft != 4:  # draft 4's are booleans qualifying minimum and maximum
            node.attrs.update(
                exclusive_minimum=_number(js.get("exclusiveMinimum")),
                exclusive_maximum=_number(js.get("exclusiveMaximum")),
            )
        return node

    def _object(self, js: dict, resolver: referencing.Resolver) -> _Node:
        node = _Node("object", {key: js[key] for key in self.object_keywords & js.keys()})
        properties = js.get("properties") if isinstance(js.get("properties"), dict) else {}
        patterns = js.get("patternProperties") if isinstance(js.get("patternProperties"), dict) else {}
        additional = js.get("additionalProperties", True)
        property_deps, schema_deps = {}, {}
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            for name, dep in (js.get(key) or {}).items() if isinstance(js.get(key), dict) else ():
                if isinstance(dep, list):
                    property_deps[name] = frozenset(dep)
                else:
                    schema_deps[name] = self.load(dep, resolver)
        node.attrs.update(
            properties={name: self.load(sub, resolver) for name, sub in properties.items()},
            required=set(js.get("required") or ()) if isinstance(js.get("required"), list) else set(),
            pattern_properties=[(pattern, self.load(sub, resolver)) for pattern, sub in patterns.items()],
            permits_additional=additional is not False,
            additional=self.load(additional, resolver) if isinstance(additional, dict) else None,
            property_deps=property_deps, schema_deps=schema_deps,
            min_properties=_number(js.get("minProperties")),
            max_properties=_number(js.get("maxProperties")),
            unevaluated=self._maybe(js, "unevaluatedProperties", resolver),
        )  # fmt: skip
        return node

    def _array(self, js: dict, resolver: referencing.Resolver) -> _Node:
        node = _Node("array", {key: js[key] for key in self.array_keywords & js.keys()})
        items, additional = js.get("items"), js.get("additionalItems", True)
        tuple_items = items if isinstance(items, list) else None
        if self.draft >= 2020:
            tuple_items = js.get("prefixItems") if isinstance(js.get("prefixItems"), list) else None
            if tuple_items is not None:
                items, additional = None, js.get("items", True)
        node.attrs.update(
            items=self.load(items, resolver) if isinstance(items, (dict, bool)) else None,
            tuple_items=[self.load(sub, resolver) for sub in tuple_items] if tuple_items is not None else None,
            permits_additional=additional is not False,
            additional=self.load(additional, resolver) if isinstance(additional, dict) else None,
            min_items=_number(js.get("minItems")), max_items=_number(js.get("maxItems")),
            unique_items=js.get("uniqueItems") is True,
            min_contains=_number(js.get("minContains")), max_contains=_number(js.get("maxContains")),
            unevaluated=self._maybe(js, "unevaluatedItems", resolver),
        )  # fmt: skip
        return node

    def _maybe(self, js: dict, key: str, resolver: referencing.Resolver) -> _Node | None:
        return self.load(js[key], resolver) if isinstance(js.get(key), (dict, bool)) else None


_META = {4: "http://json-schema.org/draft-04/schema#", 6: "http://json-schema.org/draft-06/schema#",
         7: "http://json-schema.org/draft-07/schema#",
         2019: "https://json-schema.org/draft/2019-09/schema",
         2020: "https://json-schema.org/draft/2020-12/schema"}  # fmt: skip


def _children(node: _Node):
    for value in node.attrs.values():
        if isinstance(value, _Node):
            yield value
        elif isinstance(value, list):
            yield from (item[1] if isinstance(item, tuple) else item for item in value)
        elif isinstance(value, dict):
            yield from value.values()


def _resolve_all(root: _Node) -> None:
    """Builds every $ref's target reachable from ``root`` (without recursion), so that a
    $ref that does not resolve fails the parse."""
    stack, seen = [root], {id(root)}
    while stack:
        node = _deref(stack.pop())
        for child in _children(node):
            if isinstance(child, _Node) and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)


def _deref(node: _Node) -> _Node:
    """A $ref's target (everit's ReferenceSchema.getReferredSchema)."""
    for _ in range(64):
        if node.kind != "ref":
            return node
        target = node.attrs.get("target")
        if target is None:
            target = node.attrs["target"] = node.loader.load(node.contents, node.resolver)
        node = target
    raise _TooComplex("a $ref chain longer than 64")


# -- the diff: Confluent's SchemaDiff -----------------------------------------------------

COMPATIBLE_CHANGES = frozenset(
    """
    ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
    MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED
    PATTERN_REMOVED MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED
    EXCLUSIVE_MAXIMUM_INCREASED EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED
    EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED MULTIPLE_OF_REMOVED
    REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
    DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED
    MAX_PROPERTIES_REMOVED MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED
    ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED UNEVALUATED_PROPERTIES_ADDED
    UNEVALUATED_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
    REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
    PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
    PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL MAX_ITEMS_INCREASED
    MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED
    MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED
    ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED UNEVALUATED_ITEMS_ADDED
    UNEVALUATED_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
    ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
    ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ENUM_ARRAY_EXTENDED
    COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split()
)


class _TooComplex(Exception):
    pass


class _Shared:
    """What every context of one pass of a comparison shares: the memo of compared pairs,
    the pairs being compared (a cycle), the incompatible pairs of the previous pass, the
    work done."""

    def __init__(self, seed: dict) -> None:
        self.memo: dict[tuple[int, int], tuple] = {}
        self.in_progress: set[tuple[int, int]] = set()
        self.seed = seed
        self.optimistic = False
        self.pairs = 0


class _Context:
    def __init__(self, shared: _Shared, path: list[str]) -> None:
        self.shared = shared
        self.path = path
        self.diffs: list[tuple[str, str]] = []

    def sub(self, *tokens: str) -> _Context:
        return _Context(self.shared, self.path + list(tokens))

    def add(self, kind: str, *tokens: str) -> None:
        self.diffs.append((kind, "#/" + "/".join(self.path + list(tokens))))

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE_CHANGES for kind, _ in self.diffs)


def _diff(writer: _Node, reader: _Node) -> list[tuple[str, str]]:
    """Confluent's SchemaDiff.compare: passes until the incompatible pairs stop changing
    (a cycle assumed compatible in one pass may prove incompatible in the next)."""
    seed: dict = {}
    pairs = 0  # across the passes
    while True:
        shared = _Shared(seed)
        shared.pairs = pairs
        ctx = _Context(shared, [])
        _compare(ctx, writer, reader)
        pairs = shared.pairs
        incompatible = {
            key: diffs for key, diffs in shared.memo.items()
            if any(kind not in COMPATIBLE_CHANGES for kind, _ in diffs)
        }  # fmt: skip
        if not shared.optimistic or incompatible.keys() == seed.keys():
            return ctx.diffs
        seed = incompatible


def _compare(ctx: _Context, original: _Node | None, update: _Node | None) -> None:
    if original is None and update is None:
        return
    if original is None:
        return ctx.add("SCHEMA_ADDED")
    if update is None:
        return ctx.add("SCHEMA_REMOVED")
    original, update = _deref(original), _deref(update)
    shared = ctx.shared
    key = (id(original), id(update))
    diffs = shared.memo.get(key)
    if diffs is None:
        if key in shared.in_progress:
            diffs = shared.seed.get(key)
            if diffs is None:
                shared.optimistic = True
                return
        else:
            shared.pairs += 1
            if shared.pairs > MAX_PAIRS:
                raise _TooComplex(f"more than {MAX_PAIRS} pairs of subschemas")
            shared.in_progress.add(key)
            try:
                pair_ctx = _Context(shared, [])
                _compare_types(pair_ctx, original, update)
            finally:
                shared.in_progress.discard(key)
            diffs = shared.memo[key] = tuple(pair_ctx.diffs)
    prefix = "#/" + "/".join(ctx.path)
    for kind, path in diffs:
        ctx.diffs.append((kind, path if not ctx.path else prefix if len(path) <= 2 else f"{prefix}/{path[2:]}"))


def _compare_types(ctx: _Context, original: _Node, update: _Node) -> None:
    if original.kind != "combined" and update.kind == "combined":
        subschemas, criterion = update.subschemas, update.criterion
        if len(subschemas) == 1 or criterion in ("anyOf", "oneOf"):
            for subschema in subschemas:
                sub = ctx.sub()
                _compare(sub, original, subschema)
                if sub.compatible():
                    ctx.diffs += sub.diffs
                    if len(subschemas) > 1:
                        ctx.add("SUM_TYPE_EXTENDED")
                    return
                if len(subschemas) == 1:
                    break
    elif original.kind == "combined" and update.kind != "combined":
        subschemas, criterion = original.subschemas, original.criterion
        if len(subschemas) == 1 or criterion == "allOf":
            for subschema in subschemas:
                sub = ctx.sub()
                _compare(sub, subschema, update)
                if sub.compatible():
                    ctx.diffs += sub.diffs
                    if len(subschemas) > 1:
                        ctx.add("PRODUCT_TYPE_NARROWED")
                    return
                if len(subschemas) == 1:
                    break
    if original.kind != update.kind:
        if original.kind == "false" or update.is_empty:
            return
        if original.connect_type == update.connect_type == "bytes":  # Kafka Connect's decimals
            return
        return ctx.add("TYPE_CHANGED")
    if original.id != update.id:
        ctx.add("ID_CHANGED")
    if original.title != update.title:
        ctx.add("TITLE_CHANGED")
    if original.description != update.description:
        ctx.add("DESCRIPTION_CHANGED")
    if _json(original.default) != _json(update.default):
        ctx.add("DEFAULT_CHANGED")
    compare = _BY_KIND.get(original.kind)
    if compare is not None:
        compare(ctx, original, update)


def _json(value: Any) -> str | None:
    return None if value is _NO_DEFAULT else jsontext.dumps(value, sort_keys=True)


def _limit(ctx: _Context, keyword: str, prefix: str, original: Any, update: Any) -> None:
    """A limit added, removed, increased or decreased (Confluent's <PREFIX>_<CHANGE>)."""
    if original == update:
        return
    if original is None:
        ctx.add(f"{prefix}_ADDED", keyword)
    elif update is None:
        ctx.add(f"{prefix}_REMOVED", keyword)
    elif original < update:
        ctx.add(f"{prefix}_INCREASED", keyword)
    else:
        ctx.add(f"{prefix}_DECREASED", keyword)


def _compare_strings(ctx: _Context, original: _Node, update: _Node) -> None:
    _limit(ctx, "maxLength", "MAX_LENGTH", original.max_length, update.max_length)
    _limit(ctx, "minLength", "MIN_LENGTH", original.min_length, update.min_length)
    if original.pattern != update.pattern:
        change = "ADDED" if original.pattern is None else "REMOVED" if update.pattern is None else "CHANGED"
        ctx.add(f"PATTERN_{change}", "pattern")


def _decimal(value: int | float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _compare_numbers(ctx: _Context, original: _Node, update: _Node) -> None:
    _limit(ctx, "maximum", "MAXIMUM", original.maximum, update.maximum)
    _limit(ctx, "minimum", "MINIMUM", original.minimum, update.minimum)
    _limit(ctx, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", original.exclusive_maximum, update.exclusive_maximum)
    _limit(ctx, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", original.exclusive_minimum, update.exclusive_minimum)
    old, new = _decimal(original.multiple_of), _decimal(update.multiple_of)
    if old != new:
        try:
            if old is None:
                ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
            elif new is None:
                ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
            elif old != 0 and new % old == 0:
                ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
            elif new != 0 and old % new == 0:
                ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
            else:
                ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
        except InvalidOperation:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if original.integer != update.integer:
        ctx.add("TYPE_EXTENDED" if original.integer else "TYPE_NARROWED")


def _compare_enums(ctx: _Context, original: _Node, update: _Node) -> None:
    old, new = original.values, update.values
    if old != new:
        ctx.add(
            "ENUM_ARRAY_EXTENDED" if new >= old else "ENUM_ARRAY_NARROWED" if old >= new else "ENUM_ARRAY_CHANGED",
            "enum",
        )


def _compare_consts(ctx: _Context, original: _Node, update: _Node) -> None:
    if original.value != update.value:
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _compare_nots(ctx: _Context, original: _Node, update: _Node) -> None:
    sub = ctx.sub("not")
    _compare(sub, update.schema, original.schema)  # reversed: not narrows what it excludes
    ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED", "not")


def _compare_combined(ctx: _Context, original: _Node, update: _Node) -> None:
    old_criterion, new_criterion = original.criterion, update.criterion
    if old_criterion != new_criterion:
        single_old, single_new = len(original.subschemas) == 1, len(update.subschemas) == 1
        if (
            new_criterion == "anyOf"
            or (single_old and single_new)
            or (single_old and new_criterion == "oneOf")
            or (single_new and old_criterion == "allOf")
        ):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            return ctx.add("COMBINED_TYPE_CHANGED")
    olds = list({sub.key: sub for sub in original.subschemas}.values())
    news = list({sub.key: sub for sub in update.subschemas}.values())
    if len(olds) < len(news):
        ctx.add("PRODUCT_TYPE_EXTENDED" if new_criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(olds) > len(news):
        ctx.add("SUM_TYPE_NARROWED" if old_criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list]] = {}
    for i, old in enumerate(olds):
        for j, new in enumerate(news):
            sub = ctx.sub(f"{old_criterion}/{i}")
            _compare(sub, old, new)
            if sub.compatible():
                edges.setdefault(i, {})[j] = sub.diffs
    matching = _maximum_matching(edges)
    for i, j in matching.items():
        ctx.diffs += edges[i][j]
    if len(matching) < min(len(olds), len(news)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _maximum_matching(edges: dict[int, dict[int, Any]]) -> dict[int, int]:
    """A maximum bipartite matching (augmenting paths): left index -> right index."""
    right_of: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges.get(left, ()):
            if right not in seen:
                seen.add(right)
                if right not in right_of or augment(right_of[right], seen):
                    right_of[right] = left
                    return True
        return False

    for left in edges:
        augment(left, set())
    return {left: right for right, left in right_of.items()}


def _open(node: _Node) -> bool:
    """An open content model: anything extra allowed (everit's isOpenContentModel)."""
    if not node.permits_additional or node.additional is not None:
        return False
    if node.kind == "object" and node.pattern_properties:
        return False
    return node.unevaluated is None or node.unevaluated.is_empty


def _partial(node: _Node, name: str | None = None) -> _Node | None:
    """The schema extra properties (items) must match in a partially open content model."""
    for pattern, schema in (node.pattern_properties or ()) if name is not None else ():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    if node.additional is not None:
        return node.additional
    if node.permits_additional and node.unevaluated is not None:
        if node.unevaluated.kind != "false" and not node.unevaluated.is_empty:
            return node.unevaluated
    return None


def _compare_objects(ctx: _Context, original: _Node, update: _Node) -> None:
    for name in original.properties:
        if name in update.properties:
            was, now = name in original.required, name in update.required
            if was and not now:
                ctx.add("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
            elif now and not was:
                with_default = update.properties[name].default is not _NO_DEFAULT
                ctx.add(
                    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if with_default else "REQUIRED_ATTRIBUTE_ADDED",
                    "required",
                    name,
                )
    for name in {**original.properties, **update.properties}:
        sub = ctx.sub("properties", name)
        old, new = original.properties.get(name), update.properties.get(name)
        if new is None:
            _property_removed(sub, update, name, old)
        elif old is None:
            _property_added(sub, original, update, name, new)
        else:
            _compare(sub, old, new)
        ctx.diffs += sub.diffs
    for name in {**original.property_deps, **update.property_deps}:
        old, new = original.property_deps.get(name), update.property_deps.get(name)
        if new is None:
            ctx.add("DEPENDENCY_ARRAY_REMOVED", "dependencies", name)
        elif old is None:
            ctx.add("DEPENDENCY_ARRAY_ADDED", "dependencies", name)
        elif old != new:
            kind = "EXTENDED" if new >= old else "NARROWED" if old >= new else "CHANGED"
            ctx.add(f"DEPENDENCY_ARRAY_{kind}", "dependencies", name)
    for name in {**original.schema_deps, **update.schema_deps}:
        old, new = original.schema_deps.get(name), update.schema_deps.get(name)
        if new is None:
            ctx.add("DEPENDENCY_SCHEMA_REMOVED", "dependencies", name)
        elif old is None:
            ctx.add("DEPENDENCY_SCHEMA_ADDED", "dependencies", name)
        else:
            sub = ctx.sub("dependencies", name)
            _compare(sub, old, new)
            ctx.diffs += sub.diffs
    _compare_additional(ctx, original, update, "additionalProperties", "ADDITIONAL_PROPERTIES")
    _compare_unevaluated(ctx, original, update, "unevaluatedProperties", "UNEVALUATED_PROPERTIES")
    _limit(ctx, "maxProperties", "MAX_PROPERTIES", original.max_properties, update.max_properties)
    _limit(ctx, "minProperties", "MIN_PROPERTIES", original.min_properties, update.min_properties)


def _property_removed(ctx: _Context, update: _Node, name: str, old: _Node) -> None:
    if _open(update):
        return ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
    partial = _partial(update, name)
    if partial is not None:
        sub = ctx.sub()
        _compare(sub, old, partial)
        ctx.diffs += sub.diffs
        covered = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        return ctx.add(f"PROPERTY_REMOVED_{covered}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    if old.kind == "false":
        return ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _property_added(ctx: _Context, original: _Node, update: _Node, name: str, new: _Node) -> None:
    required, with_default = name in update.required, new.default is not _NO_DEFAULT
    if _open(original):
        if new.is_empty:
            return ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
        if required:
            return ctx.add(
                "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if with_default
                else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
            )  # fmt: skip
        return ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
    partial = _partial(original, name)
    if partial is not None:
        sub = ctx.sub()
        _compare(sub, partial, new)
        ctx.diffs += sub.diffs
        covered = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        ctx.add(f"PROPERTY_ADDED_{covered}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    if required:
        ctx.add(
            "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if with_default
            else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
        )  # fmt: skip
    else:
        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")


def _compare_additional(ctx: _Context, original: _Node, update: _Node, keyword: str, prefix: str) -> None:
    sub = ctx.sub(keyword)
    if original.permits_additional != update.permits_additional:
        sub.add(f"{prefix}_ADDED" if update.permits_additional else f"{prefix}_REMOVED")
    elif original.additional is None and update.additional is not None:
        sub.add(f"{prefix}_NARROWED")
    elif update.additional is None and original.additional is not None:
        sub.add(f"{prefix}_EXTENDED")
    else:
        _compare(sub, original.additional, update.additional)
    ctx.diffs += sub.diffs


def _compare_unevaluated(ctx: _Context, original: _Node, update: _Node, keyword: str, prefix: str) -> None:
    old, new = original.unevaluated, update.unevaluated
    if old is None and new is None:
        return
    sub = ctx.sub(keyword)
    old_false, new_false = old is not None and old.kind == "false", new is not None and new.kind == "false"
    if old is None:
        sub.add(f"{prefix}_REMOVED" if new_false else f"{prefix}_NARROWED")
    elif new is None:
        sub.add(f"{prefix}_ADDED" if old_false else f"{prefix}_EXTENDED")
    elif old_false and not new_false:
        sub.add(f"{prefix}_ADDED")
    elif new_false and not old_false:
        sub.add(f"{prefix}_REMOVED")
    elif old.is_empty and not new.is_empty:
        sub.add(f"{prefix}_NARROWED")
    elif new.is_empty and not old.is_empty:
        sub.add(f"{prefix}_EXTENDED")
    else:
        _compare(sub, old, new)
    ctx.diffs += sub.diffs


def _compare_arrays(ctx: _Context, original: _Node, update: _Node) -> None:
    sub = ctx.sub("items")
    _compare(sub, original.items, update.items)
    ctx.diffs += sub.diffs
    olds, news = original.tuple_items or [], update.tuple_items or []
    for index in range(max(len(olds), len(news))):
        sub = ctx.sub(f"items/{index}")
        if index < len(olds) and index < len(news):
            _compare(sub, olds[index], news[index])
        elif index < len(olds):
            _item_removed(sub, update, olds[index])
        else:
            _item_added(sub, original, news[index])
        ctx.diffs += sub.diffs
    _compare_additional(ctx, original, update, "additionalItems", "ADDITIONAL_ITEMS")
    _compare_unevaluated(ctx, original, update, "unevaluatedItems", "UNEVALUATED_ITEMS")
    _limit(ctx, "maxItems", "MAX_ITEMS", original.max_items, update.max_items)
    _limit(ctx, "minItems", "MIN_ITEMS", original.min_items, update.min_items)
    if original.unique_items != update.unique_items:
        ctx.add("UNIQUE_ITEMS_REMOVED" if original.unique_items else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    _limit(ctx, "maxContains", "MAX_CONTAINS", original.max_contains, update.max_contains)
    _limit(ctx, "minContains", "MIN_CONTAINS", original.min_contains, update.min_contains)


def _item_removed(ctx: _Context, update: _Node, old: _Node) -> None:
    if _open(update):
        return ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
    partial = _partial(update)
    if partial is not None:
        sub = ctx.sub()
        _compare(sub, old, partial)
        ctx.diffs += sub.diffs
        covered = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        return ctx.add(f"ITEM_REMOVED_{covered}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    ctx.add(
        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL"
        if old.kind == "false"
        else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"
    )


def _item_added(ctx: _Context, original: _Node, new: _Node) -> None:
    if _open(original):
        return ctx.add(
            "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if new.is_empty else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"
        )
    partial = _partial(original)
    if partial is not None:
        sub = ctx.sub()
        _compare(sub, partial, new)
        ctx.diffs += sub.diffs
        covered = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        return ctx.add(f"ITEM_ADDED_{covered}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


_BY_KIND = {
    "string": _compare_strings,
    "number": _compare_numbers,
    "enum": _compare_enums,
    "const": _compare_consts,
    "not": _compare_nots,
    "combined": _compare_combined,
    "object": _compare_objects,
    "array": _compare_arrays,
}


def _describe(kind: str, path: str) -> str:
    """Confluent's Difference message, "reader"/"writer" in place of its new/old."""
    if kind in _KEYWORD_ADDED_OR_REMOVED:
        text = f"The keyword at path '{path}' in the reader schema is not present in the writer schema"
    elif kind in _VALUE_INCREASED:
        text = f"The value at path '{path}' in the reader schema is more than its value in the writer schema"
    elif kind in _VALUE_DECREASED:
        text = f"The value at path '{path}' in the reader schema is less than its value in the writer schema"
    elif kind in ("PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"):
        text = f"The value at path '{path}' is different between the reader and writer schema"
    elif kind in _NARROWED:
        text = (
            f"An array or combined type at path '{path}' has fewer elements in the reader schema than the writer schema"
        )
    elif kind in ("DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"):
        text = (
            f"An array or combined type at path '{path}' has more elements in the reader schema than the writer schema"
        )
    elif kind in _TYPE_CHANGED:
        text = f"A type at path '{path}' is different between the reader schema and the writer schema"
    elif kind in _ADDED_TO_OPEN:
        text = (
            "The reader schema has an open content model and has a property or item at path"
            f" '{path}' which is missing in the writer schema"
        )
    elif kind == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
        text = (
            "The reader schema has an unopen content model and has a required property at path"
            f" '{path}' which is missing in the writer schema"
        )
    elif kind in ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"):
        text = (
            "The reader has a closed content model and is missing a property or item present at"
            f" path '{path}' in the writer schema"
        )
    elif kind.endswith("_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        text = (
            f"A property or item is missing in the reader schema but present at path '{path}' in"
            " the writer schema and is not covered by its partially open content model"
        )
    elif kind.endswith("_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        text = (
            f"The reader schema has a property or item at path '{path}' which is missing in the"
            " writer schema and is not covered by its partially open content model"
        )
    else:
        text = ""
    return f'{{errorType:"{kind}", description:"{text}\'}}'


_KEYWORD_ADDED_OR_REMOVED = frozenset(
    """
    MAXIMUM_ADDED MINIMUM_ADDED EXCLUSIVE_MAXIMUM_ADDED EXCLUSIVE_MINIMUM_ADDED MULTIPLE_OF_ADDED
    MAX_LENGTH_ADDED MIN_LENGTH_ADDED PATTERN_ADDED REQUIRED_ATTRIBUTE_ADDED MAX_PROPERTIES_ADDED
    MIN_PROPERTIES_ADDED DEPENDENCY_ARRAY_ADDED DEPENDENCY_SCHEMA_ADDED MAX_ITEMS_ADDED
    MIN_ITEMS_ADDED MAX_CONTAINS_ADDED MIN_CONTAINS_ADDED UNIQUE_ITEMS_ADDED
    ADDITIONAL_ITEMS_REMOVED ADDITIONAL_PROPERTIES_REMOVED UNEVALUATED_PROPERTIES_REMOVED
    UNEVALUATED_ITEMS_REMOVED
""".split()
)
_VALUE_INCREASED = frozenset(
    """
    MIN_LENGTH_INCREASED MINIMUM_INCREASED EXCLUSIVE_MINIMUM_INCREASED MIN_PROPERTIES_INCREASED
    MULTIPLE_OF_EXPANDED MIN_ITEMS_INCREASED MIN_CONTAINS_INCREASED
""".split()
)
_VALUE_DECREASED = frozenset(
    """
    MAX_LENGTH_DECREASED MAXIMUM_DECREASED MAX_ITEMS_DECREASED MAX_CONTAINS_DECREASED
    EXCLUSIVE_MAXIMUM_DECREASED MAX_PROPERTIES_DECREASED
""".split()
)
_NARROWED = frozenset(
    """
    ADDITIONAL_ITEMS_NARROWED ENUM_ARRAY_NARROWED SUM_TYPE_NARROWED ADDITIONAL_PROPERTIES_NARROWED
    UNEVALUATED_PROPERTIES_NARROWED UNEVALUATED_ITEMS_NARROWED
""".split()
)
_ADDED_TO_OPEN = frozenset(
    """
    REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_OPEN_CONTENT_MODEL
""".split()
)
_TYPE_CHANGED = frozenset(
    """
    TYPE_CHANGED TYPE_NARROWED COMBINED_TYPE_CHANGED COMBINED_TYPE_SUBSCHEMAS_CHANGED
    ENUM_ARRAY_CHANGED
""".split()
)


# -- jsonschema, the keywords a payload could make slow done in bounded time --------------


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    """RE2 (time linear in the text) where it reads the pattern; Python's re only for what
    RE2 lacks (lookarounds, backreferences)."""
    try:
        return re2.compile(pattern)
    except re2.error:
        return re.compile(pattern)


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if _regex(pattern).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [_regex(pattern) for pattern in schema.get("patternProperties", {})]
    extras = [key for key in instance if key not in properties and not any(p.search(key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        unexpected = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({unexpected} unexpected)")


def _identity(value: Any) -> Any:
    """A hashable value equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, dict):
        return "object", frozenset((key, _identity(item)) for key, item in value.items())
    if isinstance(value, list):
        return "array", tuple(_identity(item) for item in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return type(value).__name__, value
    return "number", int(value) if isinstance(value, float) and value.is_integer() else value


def _unique_items(validator, unique, instance, schema):
    """In linear time (jsonschema's compares every pair of unsortable items)."""
    if unique and validator.is_type(instance, "array"):
        identities = [_identity(item) for item in instance]
        if len(set(identities)) != len(identities):
            yield ValidationError("the array has non-unique elements")


_BOUNDED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}
_VALIDATORS = {cls: validators.extend(cls, _BOUNDED) for cls in _DRAFTS.values()}


# -- the format ---------------------------------------------------------------------------


def _load(text: str, what: str) -> Any:
    try:
        raw = jsontext.loads(text, jsontext.MAX_SCHEMA_NESTING)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid JSON schema{what}: {exc}") from None
    if not isinstance(raw, (dict, bool)):
        raise InvalidSchema(f"Invalid JSON schema{what}: a schema is an object or a boolean")
    return raw


def _draft(raw: Any) -> type:
    dialect = raw.get("$schema") if isinstance(raw, dict) else None
    if dialect is None:
        return _DEFAULT_DRAFT
    cls = _DRAFTS.get(dialect.rstrip("#")) if isinstance(dialect, str) else None
    if cls is None:
        raise InvalidSchema(f"Invalid JSON schema: unsupported $schema {dialect!r}")
    return cls


_DRAFT_NUMBERS = {
    validators.Draft4Validator: 4, validators.Draft6Validator: 6, validators.Draft7Validator: 7,
    validators.Draft201909Validator: 2019, validators.Draft202012Validator: 2020,
}  # fmt: skip


class JsonSchema:
    """A parsed JSON schema (``ParsedSchema``)."""

    schema_type = "JSON"

    def __init__(self, raw: Any, validator: Any, root: _Node) -> None:
        self.raw = raw
        self._validator = validator
        self.root = root

    @property
    def name(self) -> str | None:
        """The schema's title (Confluent's ``name()``)."""
        title = self.raw.get("title") if isinstance(self.raw, dict) else None
        return title if isinstance(title, str) else None

    def canonical(self) -> str:
        return jsontext.dumps(self.raw)

    def normalized(self) -> str:
        return jsontext.dumps(self.raw, sort_keys=True)

    def validate(self, payload: memoryview) -> None:
        self.decode(payload)

    def decode(self, payload: memoryview) -> Any:
        """The payload's JSON value, validated as ``validate`` does (raises InvalidPayload)."""
        try:
            value = jsontext.loads(bytes(payload), jsontext.MAX_VALUE_NESTING)
        except ValueError as exc:
            raise InvalidPayload(f"not a JSON document: {exc}") from None
        try:
            error = next(self._validator.iter_errors(value), None)
        except RecursionError:
            raise InvalidPayload("the JSON schema recurses too deeply for this document") from None
        except referencing.exceptions.Unresolvable as exc:  # a $ref the parse did not follow
            raise InvalidPayload(f"the JSON schema's $ref {exc} does not resolve") from None
        if error is not None:
            # jsonschema's messages quote the value: a long one is named by its keyword only.
            message = error.message if len(error.message) <= 200 else f"the value fails its {error.validator!r} keyword"
            raise InvalidPayload(f"does not match the JSON schema at {error.json_path}: {message}")
        return value

    def __repr__(self) -> str:
        return f"JsonSchema({self.canonical()})"


class JsonSchemaFormat:
    """The JSON ``SchemaFormat``."""

    schema_type = "JSON"

    def parse(self, schema: str, references: Mapping[str, str]) -> JsonSchema:
        raw = _load(schema, "")
        cls = _draft(raw)
        try:
            cls.check_schema(raw)
        except jsonschema.SchemaError as exc:
            raise InvalidSchema(f"Invalid JSON schema: {exc.message} at {exc.json_path}") from None
        spec = referencing.jsonschema.specification_with(cls.META_SCHEMA["$schema"])
        draft = _DRAFT_NUMBERS[cls]
        base = raw.get("id" if draft == 4 else "$id") if isinstance(raw, dict) else None
        base = base if isinstance(base, str) else ""
        registry: referencing.Registry = referencing.Registry()
        for name, text in references.items():
            resource = referencing.Resource.from_contents(
                _load(text, f" (reference {name})"), default_specification=spec
            )
            registry = registry.with_resources((uri, resource) for uri in dict.fromkeys((name, urljoin(base, name))))
        registry = registry.crawl()
        root_resource = referencing.Resource.from_contents(raw, default_specification=spec)
        resolver = registry.resolver_with_root(root_resource)
        try:
            root = _Loader(draft).load(raw, resolver)
            _resolve_all(root)
        except RecursionError:
            raise InvalidSchema("Invalid JSON schema: nested too deeply") from None
        except _TooComplex as exc:
            raise InvalidSchema(f"Invalid JSON schema: {exc}") from None
        validator = _VALIDATORS[cls](raw, registry=registry, format_checker=cls.FORMAT_CHECKER)
        return JsonSchema(raw, validator, root)

    def compatibility_errors(self, reader: JsonSchema, writer: JsonSchema) -> list[str]:
        try:
            diffs = _diff(writer.root, reader.root)
        except (_TooComplex, InvalidSchema) as exc:
            return [f"Unexpected exception during compatibility check: {exc}"]
        except RecursionError:
            return ["Unexpected exception during compatibility check: the schemas nest too deeply"]
        return [_describe(kind, path) for kind, path in diffs if kind not in COMPATIBLE_CHANGES]


FORMAT = JsonSchemaFormat()
