"""Where a gate's settings come from: the command line, ``[tool.proflab.gate]``, a lab's manifest.

``proflab gate`` measures a candidate pipeline file against a baseline (a
file, or the same file at a git revision). What it runs and how long is
declared, like a lab's workload, in the project's ``pyproject.toml``:

    [tool.proflab.gate]
    file = "bench/pipeline.py"      # the lab-file contract: pipeline(cfg) yields once per step
    against = "main"                # or baseline = "bench/pipeline_v1.py"
    batch_size = 64
    timed_steps = 10
    max_slowdown = 1.10

    [tool.proflab.gate.params]      # more cfg attributes: cfg.hidden, cfg.layers
    hidden = 512

The command line overrides the file, the file overrides a lab's manifest
(``lab = 1`` or ``--lab 1``: that lab's workload, data and result rules),
and every setting has a default. A setting that is not known, or of the
wrong kind, is refused when it is read, with the file, the key, what is
expected and what was found: a gate never runs on a typo.
"""

from __future__ import annotations

import difflib

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vocabulary import BOOL, STRINGS, TABLE, TEXT, Key, Kind, Table, choice, integer, is_int, is_text
from ..vocabulary import json_schema as _schema_of
from ..vocabulary import number as _number


class GateConfigError(ValueError):
    """A setting that cannot be used: a usage error (exit 2), said with where it came from."""


_int = integer
_PROFILED = Kind("0 (no profile, no 'what changed'), or an integer, 2 or more",
                 lambda v: is_int(v) and (v == 0 or v >= 2), {"type": "integer", "not": {"enum": [1]}, "minimum": 0})
_DEVICE = choice(("auto", "cpu", "cuda"))
_LAB = Kind("a lab's number or name (1, \"dataloader\")", lambda v: is_int(v) or is_text(v),
            {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]})
_MEASURE = choice(("wall_time", "cpu_time"))
_TABLE = Kind("a table (like {hidden = 512})", TABLE.ok, TABLE.schema)


def _key(meaning: str, kind: Kind, default: Any = None, shown_default: str = "") -> Key:
    return Key(kind, meaning, default=default, shown_default=shown_default)


# Every setting: what it means, what it must be, its default; read with the kit's one vocabulary
# (``proflab.vocabulary``). The CI page's table ({{ keys.gate }}) and docs/schemas/gate.schema.json are made
# from these.
KEYS: dict[str, Key] = {
    "file": _key("the pipeline file the gate measures: the candidate", TEXT),
    "baseline": _key("a file to compare with", TEXT),
    "against": _key("or a git revision: the candidate is measured against the same file there (main, HEAD~1), "
                    "with the project's tree as it was (its modules too)", TEXT),
    "lab": _key("take the workload, data and result rules from this lab's manifest", _LAB),
    "batch_size": _key("`cfg.batch_size`", _int(1), 32),
    "seed": _key("`cfg.seed`", _int(0), 0),
    "data_dir": _key("`cfg.data_dir`, relative to the settings' file", TEXT, "data"),
    "params": _key("more attributes of `cfg` (`[tool.proflab.gate.params]`: `hidden = 512` is `cfg.hidden`)",
                   _TABLE, {}),
    "warmup_steps": _key("steps before the timed ones; their time counts, but not the first step's set-up "
                         "(imports, building the model, starting workers)", _int(1), 3),
    "timed_steps": _key("steps timed in every run", _int(1), 10),
    "profile_steps": _key("steps profiled after the timed ones, in each version's first run: the traces "
                          "'what changed' is read from (0: no trace, no 'what changed')", _PROFILED, 5),
    "rounds": _key("paired rounds always measured (each: one run of each version, in alternating order)",
                   _int(2), 3),
    # (On a 2-core machine with one core hogged, runs of the same file differ by ±10-14% a round: 10 rounds
    # left 2 of 10 identical pairs too noisy to call against 1.10, benchmarks/results; each extra round is
    # taken only while the call is still open, within budget_s.)
    "max_rounds": _key("rounds at most, when the slowdown is too close to max_slowdown to call", _int(2), 30),
    "budget_s": _key("seconds of measuring at most: no extra round starts past it", _number(0, strict=True), 600),
    "timeout_s": _key("seconds one run may take before it is stopped", _number(0, strict=True), 300),
    "memory_mb": _key("resident memory one run may use, its processes together, in MB", _number(1), 8192),
    "max_slowdown": _key("the slowdown that fails the gate: the candidate's step time over the baseline's",
                         _number(1.0, strict=True), 1.10),
    "device": _key("where both versions run (`cpu` or `cuda`; both on the same)", _DEVICE, "auto"),
    "measure": _key("what a step's time is: \"wall_time\" (the clock: waiting on data, a peer or the device "
                    "counts) or \"cpu_time\" (the CPU seconds of the run's processes and threads, read from "
                    "/proc: steady beside other jobs on a shared runner, for a step that is CPU work)", _MEASURE,
                    shown_default="the lab's ([timing]), else `wall_time`"),
    "threads": _key("torch intra-op threads in every run", _int(1), shown_default="torch's own"),
    "allow_different_results": _key("report values that differ between the versions without failing the gate",
                                    BOOL, False),
    "rtol": _key("relative tolerance when values are compared", _number(0), 1e-4),
    "atol": _key("absolute tolerance when values are compared", _number(0), 1e-5),
    "exact": _key("keys whose values must be equal (integer and boolean values always are)", STRINGS, []),
    "trace_dir": _key("where both versions' traces are kept (TensorBoard runs 'baseline', 'candidate')",
                      TEXT, "runs/gate"),
}
SETTINGS = Table("tool.proflab.gate", KEYS)


def json_schema() -> dict:
    """A project's ``pyproject.toml`` (or a settings file) with a ``[tool.proflab.gate]`` table, as a JSON Schema
    (draft 2020-12): the gate's table is checked key by key, the rest of the file is the project's
    (``docs/schemas/gate.schema.json``)."""
    gate = _schema_of(SETTINGS)
    gate["not"] = {"required": ["baseline", "against"]}  # one or the other
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "proflab gate settings ([tool.proflab.gate])", "type": "object",
            "properties": {"tool": {"type": "object", "properties": {"proflab": {
                "type": "object", "properties": {"gate": gate}}}}}}


# Settings that name a path: relative to the folder of the file that sets them (the command line's: the
# current folder).
PATH_KEYS = ("file", "baseline", "data_dir", "trace_dir")
# The settings a lab's manifest gives (``lab = N``), unless the settings name them again.
FROM_LAB = ("batch_size", "seed", "params", "warmup_steps", "timed_steps", "profile_steps", "timeout_s",
            "memory_mb", "threads")
TABLE = ("tool", "proflab", "gate")


@dataclass(frozen=True)
class Settings:
    """Every setting of one gate, each with where it came from (``source``: a key's file, "command
    line", a lab's manifest, or "default")."""

    values: dict[str, Any]
    source: dict[str, str] = field(default_factory=dict)
    # The project's top folder: the settings' file's (pyproject.toml's), else the current one. Both versions
    # run there, and a default path (data/, runs/gate) is its.
    root: str = ""

    def __getattr__(self, name: str) -> Any:
        if name in KEYS:
            if name in PATH_KEYS and name not in self.values and KEYS[name].default is not None:
                return str(Path(self.root or ".").resolve() / KEYS[name].default)
            return self.values.get(name, KEYS[name].default)
        raise AttributeError(name)

    def given(self, name: str) -> bool:
        return name in self.values


def _where(source: str) -> str:
    return f"{source} [{'.'.join(TABLE)}]" if source.endswith(".toml") else source


def check_value(name: str, value: Any, source: str) -> Any:
    """``value`` for setting ``name``, or a GateConfigError that says where, what is expected and what was found."""
    if name not in KEYS:
        close = difflib.get_close_matches(name, KEYS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; the settings are: {', '.join(KEYS)}"
        raise GateConfigError(f"{_where(source)}: '{name}' is not a gate setting{hint}")
    key = KEYS[name]
    if not key.kind.ok(value):
        raise GateConfigError(f"{_where(source)}: {name} must be {key.kind.expected} ({key.meaning}); "
                              f"found {value!r}")
    return value


def read_file(path: Path, required: bool = False) -> dict[str, Any]:
    """The ``[tool.proflab.gate]`` table of a TOML file (``pyproject.toml``), checked key by key; paths in it
    made relative to the file's folder. A file without the table gives {} (or, ``required``, an error)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GateConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise GateConfigError(f"{path} cannot be read: {getattr(e, 'strerror', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise GateConfigError(f"{path} is not valid TOML: {e}") from None
    table: Any = data
    for part in TABLE:
        table = table.get(part) if isinstance(table, dict) else None
    if table is None:
        if required:
            raise GateConfigError(f"{path} has no [{'.'.join(TABLE)}] table: put the gate's settings under it")
        return {}
    if not isinstance(table, dict):
        raise GateConfigError(f"{path}: {'.'.join(TABLE)} must be a table")
    found, problems = {}, []
    for name, value in table.items():  # every problem of the file at once
        try:
            found[name] = check_value(name, value, str(path))
        except GateConfigError as e:
            problems.append(str(e))
            continue
        if name in PATH_KEYS:
            found[name] = str((path.parent / value).resolve()) if not Path(value).is_absolute() else value
    if problems:
        raise GateConfigError("\n".join(problems))
    return found


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at ``start`` or above it."""
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder / "pyproject.toml"
    return None


def settings(command_line: dict[str, Any], config: Path | None = None, cwd: Path | None = None) -> Settings:
    """The gate's settings: ``command_line`` (only what was given) over ``config`` (default: the nearest
    pyproject.toml with a [tool.proflab.gate] table) over the defaults."""
    cwd = cwd or Path.cwd()
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    path = config if config is not None else find_pyproject(cwd)
    if path is not None:
        for name, value in read_file(path, required=config is not None).items():
            values[name], source[name] = value, str(path)
    for name, value in command_line.items():
        if value is None:
            continue
        values[name] = check_value(name, value, "the command line")
        if name in PATH_KEYS:
            values[name] = str((cwd / value).resolve())
        source[name] = "command line"
    if values.get("baseline") and values.get("against"):
        both = {source["baseline"], source["against"]}
        if len(both) == 1 or "command line" not in both:
            raise GateConfigError("give a baseline file or a git revision to compare against, not both")
        # the command line's choice replaces the file's
        drop = "against" if source["baseline"] == "command line" else "baseline"
        values.pop(drop)
        source.pop(drop)
    check_rounds(values)
    made = Settings(values, source, str(path.parent.resolve() if path is not None else cwd.resolve()))
    kept = Path(made.trace_dir)
    if kept.exists() and not kept.is_dir():
        raise GateConfigError(f"{_where(source.get('trace_dir', 'default'))}: trace_dir {kept} is a file, not a "
                              "folder: the traces would not be kept; name a folder")
    return made


def check_rounds(values: dict[str, Any], where: str = "") -> None:
    """The settings' rounds agree with each other: at most as many always as at most."""
    rounds = values.get("rounds", KEYS["rounds"].default)
    most = values.get("max_rounds", KEYS["max_rounds"].default)
    if most < rounds:
        raise GateConfigError(f"{where + ': ' if where else ''}max_rounds ({most}) is below rounds ({rounds}): "
                              "a gate always measures rounds, and at most max_rounds")
