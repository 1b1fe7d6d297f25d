"""The vocabulary every manifest of the kit is read with: a lab's ``lab.toml`` and a gate's settings.

A key is declared once (``Key``): what its value must be (``Kind``), whether it is required, its default
and what it means. From that one declaration come

- the check of a file (``Problems.table``): every problem of the file at once, one a line, each naming
  the table and key, what is expected and what was found, and the known keys beside an unknown one;
- the instructor guide's table of the keys (``markdown``: ``{{ keys.workload }}`` in a page);
- a JSON Schema for editors (``json_schema``: ``docs/schemas/lab.schema.json``, ``gate.schema.json``).

The manifests' own vocabularies are ``labs.keys`` and ``grading.gate_config``. Nothing here imports the
rest of the kit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Kind:
    """What a value must be: as a message says it (``expected``), its test, and its JSON Schema."""

    expected: str
    ok: Callable[[Any], bool]
    schema: Mapping[str, Any] = field(default_factory=dict)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def integer(low: int, why: str = "") -> Kind:
    return Kind(f"an integer, {low} or more{why}", lambda v: is_int(v) and v >= low,
                {"type": "integer", "minimum": low})


def number(low: float | None = None, strict: bool = False, high: float | None = None, expected: str = "") -> Kind:
    """A finite number, at least ``low`` (above it, ``strict``), below ``high`` (strictly)."""
    if not expected:
        expected = ("a number" if low is None else
                    f"a number above {low:g}" if strict else f"a number, {low:g} or more")
    schema: dict[str, Any] = {"type": "number"}
    if low is not None:
        schema["exclusiveMinimum" if strict else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum"] = high

    def ok(v: Any) -> bool:
        return (is_number(v) and (low is None or (v > low if strict else v >= low))
                and (high is None or v < high))
    return Kind(expected, ok, schema)


def pattern(expected: str, regex: str) -> Kind:
    compiled = re.compile(regex)
    return Kind(expected, lambda v: isinstance(v, str) and compiled.fullmatch(v) is not None,
                {"type": "string", "pattern": f"^(?:{regex})$"})


def choice(values: tuple[Any, ...], expected: str = "") -> Kind:
    return Kind(expected or " or ".join(f'"{v}"' for v in values), lambda v: v in values, {"enum": list(values)})


def names(known: Mapping[str, Any] | tuple[str, ...], what: str) -> Kind:
    """A list of names from ``known``."""
    known = tuple(known)
    return Kind(f"a list of {what} ({', '.join(known)})",
                lambda v: isinstance(v, list) and all(isinstance(x, str) and x in known for x in v),
                {"type": "array", "items": {"enum": list(known)}})


def one_of(known: Mapping[str, Any] | tuple[str, ...], what: str) -> Kind:
    """One name from ``known``."""
    known = tuple(sorted(known))
    return Kind(f"one of {what} ({', '.join(known)})", lambda v: isinstance(v, str) and v in known,
                {"enum": list(known)})


def _is_file_name(value: Any) -> bool:
    return is_text(value) and not Path(value).is_absolute() and ".." not in Path(value).parts


TEXT = Kind("a non-empty string", is_text, {"type": "string", "minLength": 1, "pattern": r"\S"})
STRING = Kind("a string", lambda v: isinstance(v, str), {"type": "string"})
BOOL = Kind("true or false", lambda v: isinstance(v, bool), {"type": "boolean"})
TABLE = Kind("a table", lambda v: isinstance(v, dict), {"type": "object"})
TEXTS = Kind("a list of non-empty strings", lambda v: isinstance(v, list) and all(is_text(x) for x in v),
             {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": r"\S"}})
STRINGS = Kind("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
               {"type": "array", "items": {"type": "string"}})
STRING_TABLE = Kind("a table of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                    {"type": "object", "additionalProperties": {"type": "string"}})
FILE = Kind("a file name in the lab's folder", _is_file_name, {"type": "string", "minLength": 1})
FOLDER = Kind("a folder name under data/", _is_file_name, {"type": "string", "minLength": 1})


@dataclass(frozen=True)
class Key:
    """One key of a manifest's table: its kind, whether it must be there, its default, what it means.
    ``shown_default``: the default as the guide says it, where that is not the value itself."""

    kind: Kind
    meaning: str
    required: bool = False
    default: Any = None
    shown_default: str = ""

    def default_text(self) -> str:
        if self.shown_default:
            return self.shown_default
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, str):
            return f'"{self.default}"'
        if isinstance(self.default, (list, dict)):
            return "[]" if isinstance(self.default, list) else "{}"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


@dataclass(frozen=True)
class Table:
    """A table of a manifest (``name`` as messages and the guide write it: ``workload``,
    ``results.KEY``; "" for the top level), its keys in the order the guide lists them."""

    name: str
    keys: dict[str, Key]
    meaning: str = ""
    # tables under it whose keys are their own (``[workload.params]``: any name, any value)
    open_tables: tuple[str, ...] = ()


def got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Problems:
    """The problems found in one manifest, one line each: ``file: [table] key ...``."""

    def __init__(self, where: str):
        self.where = where
        self.lines: list[str] = []

    def add(self, table: str, text: str) -> None:
        self.lines.append(f"{self.where}: " + (f"[{table}] " if table else "") + text)

    def table(self, data: dict, table: Table, name: str | None = None,
              keys: dict[str, Key] | None = None) -> dict:
        """The keys of ``data`` whose values are what ``table`` asks (``keys``: in place of its own); every
        other key is a problem. ``name``: the table's name in messages, where it is not ``table.name``
        (``results.loss``, ``evidence[2]``)."""
        keys = table.keys if keys is None else keys
        name = table.name if name is None else name
        unknown = sorted(set(data) - set(keys))
        if unknown:
            self.add(name, f"has unknown key(s) {', '.join(unknown)}; known: {', '.join(keys)}")
        good = {}
        for key, spec in keys.items():
            if key not in data:
                if spec.required:
                    self.add(name, f"[{key}] is missing" if spec.kind is TABLE and not name
                             else f"{key} is missing: it must be {spec.kind.expected}")
            elif spec.kind.ok(data[key]):
                good[key] = data[key]
            else:
                self.add(name, f"{key} must be {spec.kind.expected} (got {got(data[key])})")
        return good


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(table: Table, required: bool = True) -> str:
    """The guide's table of ``table``'s keys: key, required (with the default of an optional one), meaning."""
    if required:
        lines = ["| key | required | what it is |", "|---|---|---|"]
    else:
        lines = ["| key | default | what it is |", "|---|---|---|"]
    for name, key in table.keys.items():
        default = key.default_text()
        if required:
            need = "yes" if key.required else f"no ({_cell(default)})" if default else "no"
        else:
            need = _cell(default) if default else "—"
        lines.append(f"| `{name}` | {need} | {_cell(key.meaning)} |")
    return "\n".join(lines)


def json_schema(table: Table, nested: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``table`` as a JSON Schema object (draft 2020-12): its keys' kinds, the required ones, no other key.
    ``nested``: the schema of a key whose value is a table of its own (``files``, ``workload``)."""
    properties: dict[str, Any] = {}
    for name, key in table.keys.items():
        schema = dict((nested or {}).get(name) or key.kind.schema)
        schema.setdefault("description", key.meaning)
        if key.default is not None and not isinstance(key.default, (list, dict)):
            schema.setdefault("default", key.default)
        properties[name] = schema
    return {"type": "object", "properties": properties,
            "required": [name for name, key in table.keys.items() if key.required],
            "additionalProperties": False}
