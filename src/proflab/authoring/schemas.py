"""The JSON Schemas of the kit's manifests, for editors: ``docs/schemas/lab.schema.json`` (a lab's
``lab.toml``) and ``docs/schemas/gate.schema.json`` (a project's ``[tool.proflab.gate]``).

Both are made from the manifests' vocabulary (``labs.keys``, ``grading.gate_config``), never written by
hand: ``python -m proflab.authoring.schemas`` writes them again, and a test fails when the files in the
repository differ from what the vocabulary makes. An editor that reads Taplo's ``#:schema`` directive
(VS Code's Even Better TOML, among others) checks a manifest as it is typed; the first line of every
``lab.toml`` points to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import paths


def made() -> dict[str, str]:
    """Each schema file's name and text, as the vocabulary makes them."""
    from ..grading import gate_config
    from ..labs import keys

    def text(schema: dict) -> str:
        return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    return {"lab.schema.json": text(keys.json_schema()), "gate.schema.json": text(gate_config.json_schema())}


def folder(root: Path | None = None) -> Path:
    return (root or paths.root()) / "docs" / "schemas"


def write(root: Path | None = None) -> list[Path]:
    target = folder(root)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in made().items():
        (target / name).write_text(text, encoding="utf-8")
        written.append(target / name)
    return written


if __name__ == "__main__":
    for path in write():
        print(f"wrote {paths.display(path)}")
    sys.exit(0)
