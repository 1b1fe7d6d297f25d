"""The kit's figures by name: ``{{ name }}`` in a page of the site, or in a lab's debrief, becomes the figure.

A name is one of
- a measured figure, from ``docs/figures/figures.json``, written by ``python docs/gen_figures.py`` from real
  runs of the labs (``{{ lab6.run-exercise.op.c10d::allreduce_.calls }}``, ``{{ lab6.machine }}``);
- a constant of a lab's manifest, read from ``labs/NN_*/lab.toml`` (``{{ lab6.toml.speedup.cpu }}``; a float
  also as a percentage, ``{{ lab0.toml.overhead.cpu_pct }}``; the tables of an array counted from 1,
  ``{{ lab9.toml.evidence.2.max_vs_original }}``);
- a fact of the kit's code, derived here (``{{ lab1.schedule }}``, ``{{ lab1.active_steps }}``);
- a table of a manifest's keys, made from its vocabulary (``{{ keys.workload }}``, ``{{ keys.gate_settings }}``).

The site's hook (``docs/figures_hook.py``) and ``proflab debrief`` substitute with the same functions; an
unknown name is an error in both.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from .. import paths

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.:#*\-/]+)\s*\}\}")

# How the kit's runner profiles a lab (src/proflab/running/runner.py): a test checks that the runner
# still calls exactly this, so a change of the code that the pages do not follow fails.
KIT_SCHEDULE = "schedule(wait=0, warmup=1, active=profiled - 1, repeat=1)"


def figures_file(root: Path | None = None) -> Path:
    return (root or paths.root()) / "docs" / "figures" / "figures.json"


def _flat(prefix: str, table: dict, out: dict[str, str]) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            _flat(name, value, out)
        elif isinstance(value, bool):
            out[name] = str(value).lower()
        elif isinstance(value, (int, float)):
            out[name] = f"{value:g}"
            if isinstance(value, float):
                out[name + "_pct"] = f"{value * 100:g}"
        elif isinstance(value, str):
            out[name] = value
        elif isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            out[name] = ", ".join(str(v) for v in value)
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):  # [[evidence]]: counted from 1
            for n, each in enumerate(value, 1):
                _flat(f"{name}.{n}", each, out)


def code_facts(root: Path | None = None) -> dict[str, str]:
    """What the labs' manifests and the kit's runner say, for every lab with a lab.toml."""
    facts: dict[str, str] = {}
    for manifest in sorted(((root or paths.root()) / "labs").glob("*/lab.toml")):
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        n = data.get("number")
        if not isinstance(n, int):
            continue
        _flat(f"lab{n}.toml", {k: v for k, v in data.items() if k != "hints"}, facts)
        facts[f"lab{n}.hints"] = str(len(data.get("hints", [])))
        w = data.get("workload", {})
        if {"warmup_steps", "timed_steps", "profile_steps"} <= w.keys():
            p = w["profile_steps"]
            facts[f"lab{n}.steps"] = str(w["warmup_steps"] + w["timed_steps"] + p)
            if p >= 2:
                facts[f"lab{n}.active_steps"] = str(p - 1)
                facts[f"lab{n}.schedule"] = KIT_SCHEDULE.replace("profiled - 1", str(p - 1))
    return facts


def key_tables() -> dict[str, str]:
    """The tables of keys the guides show, made from the manifests' vocabulary: ``{{ keys.workload }}`` (a
    table of ``lab.toml``, ``labs.keys.tables``), ``{{ keys.gate_settings }}`` (``[tool.proflab.gate]``)."""
    from .. import vocabulary
    from ..grading import gate_config
    from ..labs import keys

    tables = {f"keys.{name}": vocabulary.markdown(table) for name, table in keys.tables().items()}
    tables["keys.gate_settings"] = vocabulary.markdown(gate_config.SETTINGS, required=False)
    return tables


def measured(root: Path | None = None) -> dict[str, str]:
    path = figures_file(root)
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("values", {})


def all_figures(root: Path | None = None) -> dict[str, str]:
    return {**measured(root), **code_facts(root), **key_tables()}


def substitute(markdown: str, figures: dict[str, str], where: str = "") -> str:
    """``markdown`` with every ``{{ name }}`` replaced; KeyError naming every unknown name."""
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(markdown) if m.group(1) not in figures})
    if unknown:
        raise KeyError(f"{where}: no figure named {', '.join(unknown)} (docs/figures/figures.json, a lab.toml, "
                       "or src/proflab/reporting/figures.py); run python docs/gen_figures.py")
    return PLACEHOLDER.sub(lambda m: figures[m.group(1)], markdown)
