"""Encoders and decoders built from Kafka's own JSON message definitions.

Theory of operation
-------------------
``messages/*.json`` are Apache Kafka's definitions of every request and response
(fields, the versions that carry each field, nullable, flexible and tagged versions).
:func:`load_message` reads one definition and builds, once per process:

* one slotted attrs class per struct (``ProduceRequest``, ``TopicProduceData``, ...),
  whose attributes are the snake_case field names and whose defaults are Kafka's;
* per version, lazily, a decoder and an encoder: lists of small closures, one per field
  present in that version, so decoding a request walks a flat list instead of
  re-reading the schema.

Fields absent from a version keep their defaults when decoding and are skipped when
encoding. Tagged fields are written only when they differ from their default, as Kafka
writes them; unknown tags from newer peers are skipped.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import attrs

from ..errors import CorruptRequest
from .primitives import ZERO_UUID, Reader, Writer

_MAX_VERSION = 0x7FFF
_BYTES_LIKE = (bytes, bytearray, memoryview)


def parse_versions(text: str | None) -> tuple[int, int]:
    """``"0+"`` -> (0, MAX), ``"3-13"`` -> (3, 13), ``"5"`` -> (5, 5), ``"none"`` -> empty."""
    if text is None or text == "none":
        return (1, 0)
    if text.endswith("+"):
        return (int(text[:-1]), _MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def _in(rng: tuple[int, int], v: int) -> bool:
    return rng[0] <= v <= rng[1]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_PRIMITIVES = {"int8", "int16", "uint16", "int32", "int64", "float64", "bool", "string", "bytes", "records", "uuid"}


@attrs.frozen
class FieldSpec:
    name: str
    attr: str
    type: str
    versions: tuple[int, int]
    nullable: tuple[int, int]
    tagged: tuple[int, int]
    tag: int | None
    flexible: tuple[int, int] | None
    default: Any
    struct: StructSpec | None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type


@attrs.define(eq=False)
class StructSpec:
    name: str
    fields: list[FieldSpec]
    cls: type = None  # type: ignore[assignment]
    _decoders: dict = attrs.Factory(dict)
    _encoders: dict = attrs.Factory(dict)


@attrs.frozen
class MessageSpec:
    """One JSON definition: a request, a response or a header."""

    name: str
    api_key: int | None
    type: str
    valid: tuple[int, int]
    flexible: tuple[int, int]
    root: StructSpec
    structs: dict[str, StructSpec]

    @property
    def cls(self) -> type:
        return self.root.cls

    def struct(self, name: str) -> type:
        """The class of a nested struct, by its JSON type name (``"TopicProduceResponse"``)."""
        return self.structs[name].cls

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible, version)

    def decode(self, version: int, reader: Reader) -> Any:
        return _decoder(self.root, version, self.is_flexible(version))(reader)

    def decode_bytes(self, version: int, data: bytes | memoryview) -> Any:
        r = Reader(data)
        msg = self.decode(version, r)
        if r.remaining:
            raise CorruptRequest(f"{r.remaining} unexpected trailing bytes after {self.name} v{version}")
        return msg

    def encode(self, version: int, obj: Any, w: Writer | None = None) -> Writer:
        w = w or Writer()
        _encoder(self.root, version, self.is_flexible(version))(w, obj)
        return w


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _default(ftype: str, raw: Any, struct: StructSpec | None) -> Any:
    if ftype.startswith("[]"):
        return None if raw == "null" else attrs.Factory(list)
    if struct is not None:
        return None if raw == "null" else attrs.Factory(struct.cls)
    if raw == "null":
        return None
    if ftype in ("int8", "int16", "uint16", "int32", "int64"):
        return int(str(raw), 0) if raw not in (None, "") else 0
    if ftype == "float64":
        return float(raw) if raw not in (None, "") else 0.0
    if ftype == "bool":
        return raw in (True, "true")
    if ftype == "string":
        return raw if raw is not None else ""
    if ftype == "bytes":
        return b""
    if ftype == "records":
        return None
    if ftype == "uuid":
        return ZERO_UUID
    raise ValueError(f"unknown type {ftype}")


def _build_struct(name: str, raw_fields: list[dict], structs: dict[str, StructSpec]) -> StructSpec:
    spec = StructSpec(name, [])
    for rf in raw_fields:
        ftype = rf["type"]
        element = ftype[2:] if ftype.startswith("[]") else ftype
        struct = None
        if element not in _PRIMITIVES:
            if "fields" in rf:
                struct = _build_struct(element, rf["fields"], structs)
                structs[element] = struct
            else:
                struct = structs[element]  # a commonStruct, built beforehand
        spec.fields.append(
            FieldSpec(
                name=rf["name"],
                attr=snake(rf["name"]),
                type=ftype,
                versions=parse_versions(rf.get("versions")),
                nullable=parse_versions(rf.get("nullableVersions")),
                tagged=parse_versions(rf.get("taggedVersions")) if "tag" in rf else (1, 0),
                tag=rf.get("tag"),
                flexible=parse_versions(rf["flexibleVersions"]) if "flexibleVersions" in rf else None,
                default=rf.get("default"),
                struct=struct,
            )
        )
    spec.cls = attrs.make_class(
        name,
        {f.attr: attrs.field(default=_default(f.type, f.default, f.struct)) for f in spec.fields},
        slots=True,
    )
    spec.cls.__module__ = __name__
    return spec


def _commons_first(raw: list[dict]) -> list[dict]:
    """Order common structs so that one used by another is built first."""
    names = {c["name"] for c in raw}
    done: list[dict] = []
    pending = list(raw)
    while pending:
        for c in pending:
            uses = {f["type"].removeprefix("[]") for f in c["fields"]} & names
            if uses <= {d["name"] for d in done}:
                done.append(c)
                pending.remove(c)
                break
        else:
            raise ValueError("cyclic common structs")
    return done


@functools.cache
def load_message(name: str, folder: str = "messages") -> MessageSpec:
    """Load ``messages/<name>.json`` (e.g. ``"ProduceRequest"``) once per process; KRaft
    metadata records come from ``folder="metadata_records"``."""
    return compile_message(resources.files(__package__).joinpath(folder, f"{name}.json").read_text())


def compile_message(text: str) -> MessageSpec:
    """Compile one JSON definition in Kafka's message format (requests, responses, and the
    ``"type": "data"`` records of coordinators and the metadata log)."""
    raw = json.loads(_strip_comments(text))
    structs: dict[str, StructSpec] = {}
    for common in _commons_first(raw.get("commonStructs", [])):
        structs[common["name"]] = _build_struct(common["name"], common["fields"], structs)
    root = _build_struct(raw["name"], raw["fields"], structs)
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        type=raw["type"],
        valid=parse_versions(raw["validVersions"]),
        flexible=parse_versions(raw.get("flexibleVersions", "none")),
        root=root,
        structs=structs,
    )


# -- per-version codecs -------------------------------------------------------------


def _value_reader(f: FieldSpec, element: bool, version: int, compact: bool) -> Callable[[Reader], Any]:
    """Reader for one value of ``f`` (its element when ``element``)."""
    t = f.element if element or not f.is_array else f.type
    nullable = _in(f.nullable, version) and not element
    if t.startswith("[]"):
        item = _value_reader(f, True, version, compact)

        def read_array(r: Reader) -> list | None:
            n = r.count(compact)
            if n < 0:
                if not nullable:
                    raise CorruptRequest(f"non-nullable field {f.name} was serialized as null")
                return None
            return [item(r) for _ in range(n)]

        return read_array
    if f.struct is not None:
        # Every struct in a message shares the message's flexibility.
        dec = _decoder(f.struct, version, compact)
        if nullable and not f.is_array:

            def read_nullable_struct(r: Reader) -> Any:
                return None if r.int8() < 0 else dec(r)

            return read_nullable_struct
        return dec
    if t == "string":

        def read_string(r: Reader) -> str | None:
            s = r.string(compact)
            if s is None and not nullable:
                raise CorruptRequest(f"non-nullable field {f.name} was serialized as null")
            return s

        return read_string
    if t in ("bytes", "records"):

        def read_bytes(r: Reader) -> memoryview | None:
            b = r.bytes(compact)
            if b is None and not nullable:
                raise CorruptRequest(f"non-nullable field {f.name} was serialized as null")
            return b

        return read_bytes
    return getattr(Reader, t)


def _value_writer(f: FieldSpec, element: bool, version: int, compact: bool) -> Callable[[Writer, Any], None]:
    t = f.element if element or not f.is_array else f.type
    if t.startswith("[]"):
        item = _value_writer(f, True, version, compact)

        def write_array(w: Writer, v: list | None) -> None:
            if v is None:
                w.length(-1, compact)
                return
            w.length(len(v), compact)
            for x in v:
                item(w, x)

        return write_array
    if f.struct is not None:
        enc = _encoder(f.struct, version, compact)
        if _in(f.nullable, version) and not element:

            def write_nullable_struct(w: Writer, v: Any) -> None:
                if v is None:
                    w.int8(-1)
                else:
                    w.int8(1)
                    enc(w, v)

            return write_nullable_struct
        return enc
    if t == "string":
        return lambda w, v: w.string(v, compact)
    if t == "records":

        def write_records(w: Writer, v: Any) -> None:
            if v is None or isinstance(v, _BYTES_LIKE):
                w.bytes(v, compact)
            else:  # e.g. a FileRegion: its bytes are sent later, after the bytes before it
                w.defer(v, compact)

        return write_records
    if t == "bytes":
        return lambda w, v: w.bytes(v, compact)
    return getattr(Writer, t)


def _plan(spec: StructSpec, version: int, flexible: bool):
    regular, tagged = [], {}
    for f in spec.fields:
        if not _in(f.versions, version):
            continue
        compact = flexible and (f.flexible is None or _in(f.flexible, version))
        if flexible and f.tag is not None and _in(f.tagged, version):
            tagged[f.tag] = (f, compact)
        else:
            regular.append((f, compact))
    return regular, tagged


def _decoder(spec: StructSpec, version: int, flexible: bool) -> Callable[[Reader], Any]:
    key = (version, flexible)
    dec = spec._decoders.get(key)
    if dec is not None:
        return dec
    regular, tagged = _plan(spec, version, flexible)
    steps = [(f.attr, _value_reader(f, False, version, c)) for f, c in regular]
    tag_readers = {tag: (f.attr, _value_reader(f, False, version, c)) for tag, (f, c) in tagged.items()}
    cls = spec.cls

    def decode(r: Reader) -> Any:
        kw = {attr: read(r) for attr, read in steps}
        if flexible:
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.uvarint()
                known = tag_readers.get(tag)
                if known is None:
                    r.skip(size)
                    continue
                sub = Reader(r.buf, r.pos, r.pos + size)
                if sub.end > r.end:
                    raise CorruptRequest(f"tagged field {tag} overruns its struct")
                kw[known[0]] = known[1](sub)
                r.pos = sub.end
        return cls(**kw)

    spec._decoders[key] = decode
    return decode


def _encoder(spec: StructSpec, version: int, flexible: bool) -> Callable[[Writer, Any], None]:
    key = (version, flexible)
    enc = spec._encoders.get(key)
    if enc is not None:
        return enc
    regular, tagged = _plan(spec, version, flexible)
    steps = [(f.attr, _value_writer(f, False, version, c)) for f, c in regular]
    defaults = attrs.fields_dict(spec.cls)
    tag_writers = []
    for tag in sorted(tagged):
        f, c = tagged[tag]
        d = defaults[f.attr].default
        default = d.factory() if isinstance(d, attrs.Factory) else d  # type: ignore[arg-type]
        tag_writers.append((tag, f.attr, default, _value_writer(f, False, version, c)))

    def encode(w: Writer, obj: Any) -> None:
        for attr, write in steps:
            write(w, getattr(obj, attr))
        if flexible:
            present = [(t, a, wr) for t, a, d, wr in tag_writers if getattr(obj, a) != d]
            w.uvarint(len(present))
            for tag, attr, write in present:
                sub = Writer()
                write(sub, getattr(obj, attr))
                if sub.deferred:
                    raise ValueError(f"a deferred value cannot be written in tagged field {attr}")
                w.uvarint(tag)
                w.uvarint(len(sub.buf))
                w.raw(sub.buf)

    spec._encoders[key] = encode
    return encode


def all_message_names() -> list[str]:
    return sorted(
        p.name[:-5] for p in resources.files(__package__).joinpath("messages").iterdir() if p.name.endswith(".json")
    )
