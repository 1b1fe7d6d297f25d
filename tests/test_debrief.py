"""A lab's debrief (``proflab debrief N``): what its page keeps back, shown by the kit once the lab is passed.

Every lab's ``debrief.md`` resolves (its figures, the command outputs it includes); on a kit of the
calibration lab with a debrief of its own, the command refuses before a pass, says where to go instead, and
shows the debrief (its figure and its included output in place) once ``proflab check`` has passed and said
so. The site itself never holds it (tests/test_docs.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, Kit, kit_labs

from proflab.reporting import debrief

CALIBRATION = Path(__file__).resolve().parent / "calibration"
FAST = "import time\nimport torch\n\n\ndef pipeline(cfg):\n    step = 0\n    while True:\n" \
       "        time.sleep(cfg.step_ms / 1000 / 3)\n        yield {'step': torch.ones(4).sum() * step}\n" \
       "        step += 1\n"
SECRET = "Sleep a third as long: the reference fix of the calibration lab."


@pytest.mark.parametrize("lab", [lab for lab in kit_labs() if lab.debrief is not None], ids=lambda lab: lab.name)
def test_every_labs_debrief_resolves_its_figures_and_outputs(lab):
    body = debrief.text(lab.debrief, REPO)
    assert "{{" not in body and "--8<--" not in body
    assert body.startswith(f"# Lab {lab.number} debrief"), body[:80]


def test_every_lab_with_a_page_has_a_debrief():
    assert [lab.name for lab in kit_labs() if lab.docs and lab.debrief is None] == []


def test_a_debrief_naming_a_figure_that_is_not_there_says_so(tmp_path):
    path = tmp_path / "debrief.md"
    path.write_text("# Lab 2 debrief\n\n{{ lab2.no-such-figure }}\n", encoding="utf-8")
    with pytest.raises(debrief.Missing, match="lab2.no-such-figure"):
        debrief.text(path, REPO)
    path.write_text('# Lab 2 debrief\n\n```text\n--8<-- "lab2/none.txt"\n```\n', encoding="utf-8")
    with pytest.raises(debrief.Missing, match="none.txt"):
        debrief.text(path, REPO)


@pytest.fixture
def cal_kit(tmp_path) -> Kit:
    root = tmp_path / "kit"
    lab = root / "labs" / "90_calibration"
    shutil.copytree(CALIBRATION, lab)
    (lab / "debrief.md").write_text(
        "# Lab 90 debrief: calibration\n\n## The reference fix\n\n" + SECRET + "\n\n"
        "Its steps took {{ lab90.check-solution.step }} each.\n\n"
        '```text\n--8<-- "lab90/check-solution.txt"\n```\n', encoding="utf-8")
    figures = root / "docs" / "figures"
    (figures / "lab90").mkdir(parents=True)
    (figures / "figures.json").write_text(json.dumps({"values": {"lab90.check-solution.step": "6.7 ms"}}))
    (figures / "lab90" / "check-solution.txt").write_text("PASSED calibration, as printed\n")
    return Kit(root)


def test_the_debrief_opens_once_the_lab_is_passed(cal_kit):
    before = cal_kit.run("debrief", "calibration")
    assert before.returncode == 1, before.stdout + before.stderr
    assert "opens once your fix passes" in before.stdout and "proflab hint 90" in before.stdout
    assert SECRET not in before.stdout

    (cal_kit.root / "labs" / "90_calibration" / "exercise.py").write_text(FAST)
    checked = cal_kit.run("check", "calibration")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "proflab debrief 90" in checked.stdout

    after = cal_kit.run("debrief", "90")
    assert after.returncode == 0, after.stdout + after.stderr
    assert SECRET in " ".join(after.stdout.split())
    assert "6.7 ms" in after.stdout and "PASSED calibration, as printed" in after.stdout
