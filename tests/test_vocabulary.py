"""One vocabulary for every manifest: the checks, the guide's tables of keys and the editors' schemas come from it.

A key of ``lab.toml`` (``proflab.labs.keys``) or of ``[tool.proflab.gate]`` (``grading.gate_config``) is
declared once. Here: the schemas in ``docs/schemas/`` are what the vocabulary makes, every manifest and gate
settings file of the repository is valid against them, the schemas refuse what the kit refuses, and the
guides show the vocabulary's own tables, not tables typed by hand.
"""

from __future__ import annotations

import json
import re
import tomllib

import jsonschema
import pytest

from conftest import REPO
from proflab import labs, vocabulary
from proflab.authoring import schemas
from proflab.grading import gate_config
from proflab.labs import keys
from proflab.reporting import figures

SCHEMAS = REPO / "docs" / "schemas"
MANIFESTS = sorted(REPO.glob("labs/*/lab.toml")) + [REPO / "tests" / "calibration" / "lab.toml"]
GATE_FILES = [REPO / "docs" / "examples" / "own-model" / "pyproject.toml",
              *sorted((REPO / "labs" / "07_gate").glob("*.toml"))]
GATE_FILES = [f for f in GATE_FILES if f.name != "lab.toml"]


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schemas_in_the_repository_are_what_the_vocabulary_makes():
    for name, text in schemas.made().items():
        assert (SCHEMAS / name).read_text(encoding="utf-8") == text, (
            f"docs/schemas/{name} is out of date: run python -m proflab.authoring.schemas")


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.parent.name)
def test_every_lab_manifest_is_valid_against_the_schema(manifest):
    data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator("lab.schema.json").iter_errors(data)]
    assert errors == []
    labs.load(manifest.parent)  # and the kit reads it


def test_a_drills_manifest_is_valid_against_the_schema():
    from proflab.authoring import drills

    for who in ("alice", "bob", "carol"):
        drill = drills.draw(who)
        data = tomllib.loads(drills.manifest(drill, drills.FIRST_NUMBER))
        assert [e.message for e in validator("lab.schema.json").iter_errors(data)] == [], who


def test_a_new_labs_manifest_points_to_the_schema_and_carries_the_format():
    template = (REPO / "src" / "proflab" / "authoring" / "templates" / "lab.toml.tmpl").read_text(encoding="utf-8")
    assert template.startswith("#:schema ../../docs/schemas/lab.schema.json\n") and f"format = {labs.FORMAT}\n" in template
    for manifest in MANIFESTS[:-1]:  # the kit's labs: the path is right from where each lab.toml is
        first = manifest.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("#:schema ") and (manifest.parent / first.split(" ", 1)[1]).resolve() == \
            (SCHEMAS / "lab.schema.json").resolve()


@pytest.mark.parametrize("settings", GATE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_gate_settings_file_is_valid_against_the_schema(settings):
    data = tomllib.loads(settings.read_text(encoding="utf-8"))
    assert [e.message for e in validator("gate.schema.json").iter_errors(data)] == []
    gate_config.read_file(settings)  # and the kit reads it


# A manifest the kit refuses, the schema refuses too (what a schema can say: kinds, bounds, known keys)
REFUSED = [
    ("batch_size = 32", "batch_size = 0"),
    ("batch_size = 32", "batch_size = 32.5"),
    ("timed_steps = 8\n", ""),
    ("number = 1\n", "number = 1\ncolour = 'red'\n"),
    ("cpu = 1.5", "cpu = 0.9"),
    ('name = "dataloader"', 'name = "Data Loader"'),
    ('allow = ["threads"]', 'allow = ["thread"]'),
    ("latency_ms = 8", "latency_ms = 0"),
    ("max_vs_original = 0.5", ""),
    ("format = 1\n", ""),
]


@pytest.mark.parametrize("old, new", REFUSED)
def test_what_the_kit_refuses_the_schema_refuses(tmp_path, old, new):
    text = (REPO / "labs" / "01_dataloader" / "lab.toml").read_text(encoding="utf-8")
    assert text.count(old) == 1
    data = tomllib.loads(text.replace(old, new))
    assert list(validator("lab.schema.json").iter_errors(data)), f"the schema takes {new!r}"
    folder = tmp_path / "01_dataloader"
    folder.mkdir()
    for f in (REPO / "labs" / "01_dataloader").iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "lab.toml").write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(labs.ManifestError):
        labs.load(folder)


def test_a_gate_setting_the_kit_refuses_the_schema_refuses_and_every_problem_is_said_at_once(tmp_path):
    settings = tmp_path / "pyproject.toml"
    settings.write_text('[tool.proflab.gate]\nfile = "p.py"\ntimed_steps = 0\nmax_slowdow = 1.2\n', encoding="utf-8")
    assert list(validator("gate.schema.json").iter_errors(tomllib.loads(settings.read_text())))
    with pytest.raises(gate_config.GateConfigError) as e:
        gate_config.read_file(settings)
    said = str(e.value)
    assert "timed_steps must be an integer, 1 or more" in said and "did you mean 'max_slowdown'" in said


# --- the guides' tables of keys ------------------------------------------------------------------------

PLACE = {"gate_settings": "ci.md"}  # every other table is the instructor guide's


def test_the_guides_show_every_table_of_the_vocabulary_and_type_none_by_hand():
    tables = figures.key_tables()
    assert set(tables) == {f"keys.{name}" for name in keys.tables()} | {"keys.gate_settings"}
    for name in tables:
        page = (REPO / "docs" / PLACE.get(name.split(".", 1)[1], "instructor.md")).read_text(encoding="utf-8")
        assert page.count("{{ " + name + " }}") == 1, f"{name} is not in its guide once"
    for page in (REPO / "docs").rglob("*.md"):
        typed = [line for line in page.read_text(encoding="utf-8").splitlines()
                 if re.match(r"\|\s*(key|setting)\s*\|", line)]
        assert typed == [], f"{page.name} types a table of keys by hand: use {{{{ keys.NAME }}}}"


def test_a_table_of_the_guide_holds_each_key_its_kind_default_and_meaning():
    shown = figures.key_tables()["keys.workload"].splitlines()
    assert shown[0] == "| key | required | what it is |"
    rows = {line.split("|")[1].strip(" `"): line for line in shown[2:]}
    assert list(rows) == list(keys.WORKLOAD.keys)
    assert "| yes |" in rows["batch_size"] and "| no (0) |" in rows["seed"]
    assert "| no (three times `rounds`) |" in rows["max_rounds"]
    assert keys.WORKLOAD.keys["timeout_s"].meaning in rows["timeout_s"]
    gate = figures.key_tables()["keys.gate_settings"]
    assert "| `max_slowdown` | 1.1 |" in gate and "| `trace_dir` | \"runs/gate\" |" in gate


def test_the_vocabulary_says_a_rule_one_way():
    # the same kind reads the same in a lab's manifest and a gate's settings
    assert vocabulary.integer(1).expected == "an integer, 1 or more"
    assert gate_config.KEYS["timed_steps"].kind.expected == keys.WORKLOAD.keys["timed_steps"].kind.expected
    assert gate_config.KEYS["timeout_s"].kind.expected == keys.WORKLOAD.keys["timeout_s"].kind.expected
