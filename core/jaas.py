"""Kafka's ``sasl.jaas.config`` values (Java JAAS syntax), as ``JaasConfig`` parses them::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

A login module class, a control flag, ``name=value`` options (values quoted, with
backslash escapes, or bare words), then ``;``. Kafka accepts exactly one module per
setting.
"""

from __future__ import annotations

import re

import attrs

from .errors import ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<punct>[=;])|(?P<word>[^\s=;"]+))', re.DOTALL)


@attrs.frozen
class LoginModule:
    name: str
    flag: str
    options: dict[str, str]


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].isspace():
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            # where, not what: the text may be a password with its closing quote missing
            raise ConfigError(f"Invalid JAAS config: unexpected text at character {pos + 1}")
        pos = m.end()
        if m["quoted"] is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", m["quoted"][1:-1], flags=re.DOTALL)))
        elif m["punct"] is not None:
            out.append((m["punct"], m["punct"]))
        else:
            out.append(("word", m["word"]))
    return out


def parse_jaas_config(text: str) -> LoginModule:
    """The one login module of a ``sasl.jaas.config`` value; ConfigError with Kafka's
    complaint when it does not parse."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "word" or i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise ConfigError("Invalid JAAS config: a login module name and a control flag are expected")
        name, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in FLAGS:
            raise ConfigError(
                f"Invalid JAAS config: login module control flag is not available in the JAAS config: {flag}"
            )
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=":
                raise ConfigError(f"Invalid JAAS config: option name=value expected in login module {name}")
            if tokens[i + 2][0] not in ("word", "value"):
                raise ConfigError(f"Invalid JAAS config: option {tokens[i][1]} has no value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError(f"Invalid JAAS config: login module {name} is not terminated by ';'")
        i += 1
        modules.append(LoginModule(name, flag, options))
    if len(modules) != 1:
        raise ConfigError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]
