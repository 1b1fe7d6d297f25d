"""Diagnosis drills (``authoring.drills``): a slow pipeline drawn per learner, graded by the labs' checker.

Quick: the same name draws the same drill, two names different ones; every bottleneck of the catalogue is
drawn for someone, and its fix applies; a drill's manifest loads; ANSWERS is read from the source, never run;
an operator's name holds a word only as a word. Slow (each bottleneck, in a kit of its own: ``drill_kit``, the
learner's way through: the original profiled with ``proflab run``, the answer read from that profile): two
attempts at gaming each (results cached at import, work done only while profiled) fail, with a right
diagnosis; a wrong diagnosis fails and does not give the answer away; a class of drills is graded by
``proflab grade``, each learner against their own. The reference fixes pass: tests/test_drills_sound.py,
measured alone.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from conftest import EMPTY_ANSWERS as EMPTY, Kit, answered, explain, who_draws

from proflab import labs
from proflab.authoring import drills
from proflab.authoring.drill_catalogue import CATALOGUE
from proflab.grading.checks import diagnosis

CHEATS = Path(__file__).resolve().parent / "cheats"
KEYS = [b.key for b in CATALOGUE]


# --- quick ---------------------------------------------------------------------------------------------------

def test_the_same_name_draws_the_same_drill_and_two_names_differ():
    assert drills.original_source(drills.draw("Ann Lee")) == drills.original_source(drills.draw("Ann Lee"))
    sources = {drills.original_source(drills.draw(name)) for name in ("ann", "bob", "carol", "dave", "erin")}
    assert len(sources) == 5
    assert len({drills.draw(f"learner{n}").bottleneck.key for n in range(40)}) == len(CATALOGUE) >= 6


@pytest.mark.parametrize("key", KEYS)
def test_each_bottleneck_is_a_drill_whose_fix_applies(key, tmp_path):
    drill = drills.draw(who_draws(key))
    original, fixed = drills.original_source(drill), drills.reference_fix(drill)
    assert original != fixed and EMPTY in original
    ast.parse(original), ast.parse(fixed)
    assert key.replace("_", " ") not in original.split('"""')[1].lower()  # the story does not name it
    (tmp_path / "labs").mkdir()
    lab = labs.load(drills.write(drill.who, tmp_path))
    assert lab.drill.bottleneck == key and lab.number >= drills.FIRST_NUMBER and lab.grading.diagnosis > 0
    assert lab.exercise.read_text() == original and not lab.solution.exists()  # the fix stays the kit's
    assert drills.write(drill.who, tmp_path) == lab.folder  # written once: the learner's exercise is theirs


def test_answers_are_read_from_the_source_never_run(tmp_path):
    path = tmp_path / "drill.py"
    path.write_text('import os\nANSWERS = {"where": "DataLoader wait", "ms_per_step": 12.5}\nos.exit(1)\n')
    assert diagnosis.answers_of(path) == {"where": "DataLoader wait", "ms_per_step": 12.5}
    path.write_text('ANSWERS = dict(where=__import__("os").getcwd())\n')
    assert "literal" in diagnosis.answers_of(path)
    path.write_text("x = 1\n")
    assert diagnosis.answers_of(path) == "the file has no ANSWERS"


def test_an_operators_name_holds_a_word_only_as_a_word():
    assert diagnosis._names("add", "aten::add_") and not diagnosis._names("add", "aten::addmm")
    assert diagnosis._names("select", "autograd::engine::evaluate_function: SelectBackward0")
    assert diagnosis._names("batch_norm", "aten::native_batch_norm") and not diagnosis._names("exp", "aten::expand")


# --- slow: the checker on drills ----------------------------------------------------------------------------

def attempt(k: Kit, lab: labs.Lab, answer: tuple[str, float], cheat: str) -> Path:
    """A generic attempt at gaming (tests/cheats), its diagnosis right: only the trick is wrong."""
    folder = k.root / "cheats"
    folder.mkdir(exist_ok=True)
    shutil.copy(CHEATS / "_lab.py", folder / "_lab.py")
    path = folder / f"{lab.name}_{cheat}"
    path.write_text(answered(EMPTY + "\n" + (CHEATS / cheat).read_text(), answer))
    return path


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("cheat", ["cached_at_import.py", "work_only_when_profiled.py"])
def test_an_attempt_at_gaming_a_drill_fails_though_its_diagnosis_is_right(drill_kit, key, cheat):
    k, found = drill_kit
    lab, answer = found[key]
    path = attempt(k, lab, answer, cheat)
    code, report = k.check_json(lab.name, "--file", str(path), env={"PROFLAB_CHEAT_LAB": lab.name,
                                                                   "PROFLAB_AUDIT": "off"})
    assert code == 1, explain(report)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["diagnosis"] in ("passed", "skipped") and "failed" in statuses.values(), explain(report)


def test_a_wrong_diagnosis_fails_and_does_not_give_the_answer_away(drill_kit):
    k, found = drill_kit
    lab, (where, ms) = found["lookups"]
    path = lab.folder / "wrong.py"
    path.write_text(answered(drills.reference_fix(drills.draw(who_draws("lookups"))), ("DataLoader wait", ms)))
    code, report = k.check_json(lab.name, "--file", str(path))
    assert code == 1, explain(report)
    check = next(c for c in report["checks"] if c["name"] == "diagnosis")
    assert check["status"] == "failed" and "not where this drill's time goes" in check["rationale"], check
    said = json.dumps(report["checks"])
    assert where not in said and "proflab run" in said  # where to look, never what is there


def test_a_class_of_drills_is_graded_each_against_its_own(drill_kit, tmp_path):
    k, found = drill_kit
    lab, answer = found["lookups"]
    other, _ = found["reads"]
    folder = tmp_path / "class"
    for learner, source in ((lab.folder.name[len("drill_"):], (lab.folder / "solution.py").read_text()),
                            (other.folder.name[len("drill_"):], other.exercise.read_text())):
        (folder / learner).mkdir(parents=True)
        (folder / learner / "drill.py").write_text(source)
    record = tmp_path / "grades.json"
    done = k.run("grade", str(folder), "--json-out", str(record))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    graded = {s["learner"]: s for s in json.loads(record.read_text())["submissions"]}
    mine, theirs = graded[lab.folder.name[len("drill_"):]], graded[other.folder.name[len("drill_"):]]
    assert mine["lab"] == lab.name and mine["verdict"] == "passed", mine
    assert theirs["lab"] == other.name and theirs["verdict"] == "failed", theirs  # handed in untouched


@pytest.mark.parametrize("who", ['a"""b\\c', "two\nlines", "Zoë O'Neil"])
def test_any_name_gives_a_drill_that_parses(who):
    import tomllib

    drill = drills.draw(who)
    ast.parse(drills.original_source(drill))
    assert tomllib.loads(drills.manifest(drill, drills.FIRST_NUMBER))["drill"]["bottleneck"] == drill.bottleneck.key
