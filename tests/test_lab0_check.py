"""Lab 0: the learner writes the profiler code, and the checker grades their own profile.

Real checks, on real traces written by the learner's own torch.profiler: the
reference passes; the untouched exercise (no profiler) fails; a profile of
every step, a missing label, wrong answers and faked traces each fail with
the reason, and where to look.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proflab.running import sandbox

from conftest import explain, failing, statuses

LAB = "00_profiler"


def variant(kit, name: str, *edits: tuple[str, str]) -> str:
    """The reference solution with ``edits`` (old, new) made, in the lab's folder."""
    source = (kit.root / "labs" / LAB / "solution.py").read_text()
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    path = kit.root / "labs" / LAB / name
    path.write_text(source)
    return str(path)


@pytest.fixture(scope="module")
def lab0_kit(kit, tmp_path_factory):
    from conftest import sharing_data

    return sharing_data(tmp_path_factory.mktemp("lab0"), kit)


def test_the_reference_profile_passes_with_a_small_overhead(lab0_kit):
    code, report = lab0_kit.check_decided("0", "--file", str(lab0_kit.root / "labs" / LAB / "solution.py"))
    assert code == 0, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "own_profile": "passed",
                                "overhead": "passed"}
    ev = report["evidence"]
    assert ev["steps"] == 3 and all(a["right"] for a in ev["answers"].values()), ev
    assert report["comparison"]["speedup"] >= 1 / 1.25 or report["comparison"]["ci_low"] > 0
    titles = [c["title"] for c in report["checks"]]
    assert titles[2:] == ["Your own profile", "Low overhead"]


def test_the_untouched_exercise_fails_for_want_of_a_profile(lab0_kit):
    code, report = lab0_kit.check_json("0", "--rounds", "1")
    assert code == 1, explain(report)
    check = failing(report)
    assert check["name"] == "own_profile" and "wrote no profile" in check["rationale"]
    assert "tensorboard_trace_handler(cfg.trace_dir)" in check["help"] and "schedule" in check["help"]


CASES = {
    "every_step": ([("schedule=schedule(wait=1, warmup=1, active=3, repeat=1),\n", "")],
                   "profile a window, not the whole loop", "schedule"),
    "no_optimizer_label": ([('            with record_function("optimizer"):\n                opt.step()',
                             "            opt.step()")], "no 'optimizer' label", 'record_function("optimizer")'),
    "wrong_answers": ([('"top_operator": "aten::convolution_backward"', '"top_operator": "aten::add_"'),
                       ('"conv_calls": 20', '"conv_calls": 17')], "2 of your 3 answers do not match",
                      "self_cpu_time_total"),
    "writes_its_own_trace": ([("import torch\n", "import json\n\nimport torch\n"),
                              ("    sort_by =", '    open(f"{cfg.trace_dir}/x.pt.trace.json", "w").write(json.dumps({}))\n'
                                              "    sort_by =")], "wrote 2 traces", "profile one window"),
}


@pytest.fixture(scope="module")
def missing(lab0_kit):
    """Every case's file, written in the lab's folder and checked in one batch (conftest.Batch)."""
    from conftest import Batch

    files = {case: variant(lab0_kit, f"{case}.py", *CASES[case][0]) for case in CASES}
    return files, Batch(lab0_kit, {"cases": ({}, [("0", Path(f), True) for f in files.values()])})


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_profile_that_misses_the_point_fails_and_says_where_to_look(missing, case):
    _, why, where = CASES[case]
    files, batch = missing
    code, report = batch.report("cases", Path(files[case]))
    assert code == 1, explain(report)
    check = failing(report)
    assert why in check["rationale"], explain(report)
    assert where in check["help"] + " ".join(check.get("details", [])), check


def test_run_prints_the_learners_table_and_serves_their_trace(lab0_kit):
    proc = lab0_kit.run("run", "0", "--file", str(lab0_kit.root / "labs" / LAB / "solution.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "aten::convolution_backward" in proc.stdout and "Self CPU" in proc.stdout
    traces = list((lab0_kit.root / "runs" / "00-profiler" / "reference").glob("*.pt.trace.json"))
    assert len(traces) == 1
    assert "with your profiler" in proc.stdout


def test_a_trace_copied_from_an_earlier_run_is_not_this_runs(lab0_kit):
    """A trace from an earlier run, copied into cfg.trace_dir: runs/ is hidden from the run's sandbox, so
    there is none to copy; unsandboxed, it is caught by its clock: it was not written while this run ran."""
    run = lab0_kit.run("run", "0", "--file", str(lab0_kit.root / "labs" / LAB / "solution.py"))
    assert run.returncode == 0, run.stderr
    original = (lab0_kit.root / "labs" / LAB / "original.py").read_text()
    fake = original.replace("import torch\n", "import glob\nimport shutil\n\nimport torch\n", 1).replace(
        '        yield {"loss": loss.detach()}\n',
        '        yield {"loss": loss.detach()}\n'
        '    for old in glob.glob("../../runs/00-profiler/reference/*.pt.trace.json"):\n'
        '        shutil.copy(old, cfg.trace_dir)\n', 1)
    fake = fake.replace('"top_operator": ""', '"top_operator": "aten::convolution_backward"').replace(
        '"conv_calls": 0', '"conv_calls": 20').replace('"backward_share": 0.0', '"backward_share": 0.65')
    path = lab0_kit.root / "labs" / LAB / "copies_a_trace.py"
    path.write_text(fake)
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", "0", "--file", str(path), "--json",
                           "--rounds", "1"], cwd=lab0_kit.root, env={**lab0_kit.env(), "PROFLAB_AUDIT": "off"},
                          capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, explain(report)
    if sandbox.engine().ok:  # runs/ is hidden from its sandbox: there was no trace to copy, and it wrote none
        assert "wrote no profile" in failing(report)["rationale"], explain(report)
    else:
        assert "not written by this run's profiler" in failing(report)["rationale"], explain(report)


SOUND = ["lab0_own_table.py", "lab0_shapes_memory.py", "lab0_prints_loss.py"]


@pytest.fixture(scope="module")
def sound(kit, tmp_path_factory):
    """The sound profiles of tests/learner_files, checked in one batch (conftest.Batch)."""
    from conftest import learner_files

    return learner_files(kit, tmp_path_factory, "0", SOUND)


def test_a_sound_fix_of_its_own_passes(sound):
    """A learner's own version (a window of two steps after waiting two, its own printing, its own answers)."""
    from conftest import LEARNER_FILES

    code, report = sound.decided("0", "0", LEARNER_FILES / "lab0_own_table.py")
    assert code == 0, explain(report)
    assert report["evidence"]["steps"] == 2


# Sound profiles written otherwise than the reference: the kit's own profile of the original's step is the
# same step, whatever the learner records with it, or adds to the step.
@pytest.mark.parametrize("name", ["lab0_shapes_memory.py", "lab0_prints_loss.py"])
def test_a_profile_recording_more_or_a_step_doing_more_passes(sound, name):
    from conftest import LEARNER_FILES

    code, report = sound.decided("0", "0", LEARNER_FILES / name)
    assert code == 0, explain(report)
    assert statuses(report)["own_profile"] == "passed", explain(report)
