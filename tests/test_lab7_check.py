"""Lab 7, keep it fast: the learner's gate settings, run by the checker on lab 1's fix.

The reference settings pass all four checks; the untouched exercise (a 1.01x
limit, two rounds, no profile) is refused at the first check: no gate can
resolve 1% on this machine. A limit in range but too tight for the rounds
cannot pass the unchanged fix, and settings without a profile catch the fix
undone without naming the DataLoader. Settings out of range, that set what
is gated, or that are not a gate's table at all, fail the first check,
before anything runs.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from conftest import Kit, explain, sharing_data, statuses

GATE_CHAIN = ("gate_settings", "gate_unchanged", "gate_regression", "gate_cause")  # lab 7's checks, by their own names

GOOD = """[tool.proflab.gate]
lab = "dataloader"
max_slowdown = 1.3
rounds = 3
max_rounds = 10
"""


def check(kit: Kit, tmp_path: Path, text: str | None = None, name: str = "mine.toml") -> tuple[int, dict]:
    if text is None:
        return kit.check_json("7")
    path = tmp_path / name
    path.write_text(text)
    return kit.check_json("7", "--file", str(path))


@pytest.fixture(scope="module")
def lab7_kit(kit, tmp_path_factory) -> Kit:
    return sharing_data(tmp_path_factory.mktemp("lab7"), kit)


def test_the_reference_settings_pass_every_check(lab7_kit):
    code, report = lab7_kit.check_json("7", "--file", str(lab7_kit.root / "labs" / "07_gate" / "solution.toml"))
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(GATE_CHAIN, "passed")
    unchanged, regression = report["evidence"]["unchanged"], report["evidence"]["regression"]
    assert unchanged["verdict"] == "passed" and unchanged["slowdown"]["high"] < 1.3
    assert regression["verdict"] == "failed" and regression["slowdown"]["low"] > 1.3
    assert "DataLoader" in regression["because"]["slower"]
    runs = lab7_kit.root / "runs" / "07-gate"
    for gate in ("unchanged", "regression"):  # both gates' traces, a baseline and a candidate each
        for which in ("baseline", "candidate"):
            assert list((runs / gate / which).glob("*.pt.trace.json")), f"no {gate}/{which} trace"


def test_the_untouched_exercise_fails_its_first_check_on_a_limit_no_gate_can_resolve(lab7_kit):
    code, report = check(lab7_kit, Path())
    assert code == 1, explain(report)
    assert statuses(report) == {"gate_settings": "failed", "gate_unchanged": "skipped",
                                "gate_regression": "skipped", "gate_cause": "skipped"}
    first = report["checks"][0]
    assert "max_slowdown = 1.01, outside 1.05–2" in first["rationale"], first["rationale"]
    assert "run-to-run noise" in first["rationale"] and "proflab gate" in first["help"]


def _gate_said(verdict: str, slowdown: tuple[float, float, float], regression: str = "", because: str = "",
              traced: bool = True):
    """A gate's report as the checker gets it back (the numbers measured, the verdict decided)."""
    from proflab.grading import gate
    from proflab.grading.checks import Check

    done = gate.GateReport(candidate="c.py", baseline="b.py", verdict=verdict,
                           checks=[Check(*c) for c in gate.CHECKS], comparison={"rounds": 4},
                           slowdown=dict(zip(("median", "low", "high"), slowdown)),
                           because={"slower": because} if because else {},
                           traces={"baseline": "b", "candidate": "c"} if traced else {})
    done.check("no_regression").status = regression or {"passed": "passed", "failed": "failed"}.get(verdict,
                                                                                                  "inconclusive")
    return done


# Which gate verdicts pass which check: a noisy machine decides which one a run gets, so each is built here.
@pytest.mark.parametrize("verdict, slowdown, status, said", [
    ("passed", (0.98, 0.85, 1.12), "passed", "no regression on the unchanged fix: 0.98×"),
    ("failed", (1.40, 1.32, 1.50), "failed", "a false alarm: your gate calls the unchanged fix a regression"),
    ("inconclusive", (1.01, 0.93, 1.09), "failed", "could not call the unchanged fix: 1.01×"),
])
def test_only_no_regression_passes_the_unchanged_fix(verdict, slowdown, status, said):
    from proflab.grading.checks import gate_cause, gate_regression, gate_unchanged
    from proflab.grading.checks import Check

    check = Check("same_results", "Passes the unchanged fix", "")
    gate_unchanged.judge_unchanged(_gate_said(verdict, slowdown), 1.05, check)
    assert check.status == status and said in check.rationale, check.rationale


@pytest.mark.parametrize("verdict, regression, status, said", [
    ("failed", "failed", "passed", "regression caught: the fix undone is 2.97×"),
    ("passed", "passed", "failed", "let the fix undone through: 2.97× the fix's step time (95% interval "
                                   "2.20–4.02×, 4 rounds), no regression against 2×"),
    ("inconclusive", "inconclusive", "failed", "too noisy to call against 2×"),
    ("failed", "skipped", "failed", "let the fix undone through"),  # a candidate that broke is no catch
])
def test_only_a_regression_verdict_catches_the_fix_undone(verdict, regression, status, said):
    from proflab.grading.checks import gate_cause, gate_regression, gate_unchanged
    from proflab.grading.checks import Check

    check = Check("gate_regression", "Catches the regression", "")
    gate_regression.judge_regression(_gate_said(verdict, (2.97, 2.20, 4.02), regression), 2.0, check)
    assert check.status == status and said in check.rationale, check.rationale


def test_the_cause_must_be_named_by_the_change_that_grew_most():
    from proflab import labs
    from proflab.grading.checks import gate_cause, gate_regression, gate_unchanged
    from proflab.grading.checks import Check

    g = labs.resolve("7").gating
    named = Check("gate_cause", "Names the cause", "")
    gate_cause.judge_cause(_gate_said("failed", (3, 2, 4), because="`enumerate(DataLoader)#…__next__` went from "
                                                                  "2.8 ms to 331 ms per step"), g, named)
    assert named.status == "passed"
    other = Check("gate_cause", "Names the cause", "")
    gate_cause.judge_cause(_gate_said("failed", (3, 2, 4), because="`aten::addmm` went from 1 ms to 2 ms"), g, other)
    assert other.status == "failed" and "without naming the DataLoader" in other.rationale
    blind = Check("gate_cause", "Names the cause", "")
    gate_cause.judge_cause(_gate_said("failed", (3, 2, 4), traced=False), g, blind)
    assert blind.status == "failed" and "no trace was recorded" in blind.rationale


# A cheap gate that still tells the two apart on this machine: the fix undone is ~3x, its copy ~1x, and a 1.6x
# limit sits far from both, so two rounds of four steps call each (a close call still gets more).
CHEAP = """[tool.proflab.gate]
lab = "dataloader"
max_slowdown = 1.6
rounds = 2
max_rounds = 8
timed_steps = 4
"""


def test_a_gate_without_a_profile_cannot_name_the_cause(lab7_kit, tmp_path):
    code, report = check(lab7_kit, tmp_path, CHEAP + "profile_steps = 0\n")
    assert code == 1, explain(report)
    assert statuses(report) == {"gate_settings": "passed", "gate_unchanged": "passed",
                                "gate_regression": "passed", "gate_cause": "failed"}
    cause = next(c for c in report["checks"] if c["name"] == "gate_cause")
    assert "without naming the DataLoader" in cause["rationale"] and "no trace" in cause["rationale"]
    assert "profile_steps" in cause["help"]


@pytest.mark.parametrize("text, said", [
    (GOOD + "batch_size = 8\n", "sets batch_size: those change what is gated"),
    (GOOD + "timed_step = 8\n", "'timed_step' is not a gate setting; did you mean 'timed_steps'?"),
    (GOOD.replace('"dataloader"', '"embeddings"'), "gates lab embeddings; this lab gates lab dataloader"),
    ("[tool.proflab.gate\nlab = 1\n", "is not valid TOML"),
    ("[tool.other]\nx = 1\n", "has no [tool.proflab.gate] table"),
    (GOOD.replace("max_slowdown = 1.3", "max_slowdown = 0.9"), "max_slowdown must be a number above 1"),
    (GOOD.replace("max_slowdown = 1.3", "max_slowdown = 3.0"), "max_slowdown = 3, outside 1.05–2"),
    (GOOD.replace("rounds = 3\n", "rounds = 300\n", 1), "rounds = 300, outside 2–10"),
    (GOOD.replace("max_rounds = 10", "max_rounds = 2"), "max_rounds (2) is below rounds (3)"),
], ids=["what-is-gated", "typo", "other-lab", "not-toml", "no-table", "limit-below-1", "limit-too-lax",
        "rounds-too-many", "rounds-disagree"])
def test_settings_the_gate_cannot_use_fail_the_first_check_before_anything_runs(lab7_kit, tmp_path, text, said):
    code, report = check(lab7_kit, tmp_path, text)
    assert code == 1, explain(report)
    assert statuses(report)["gate_settings"] == "failed" and statuses(report)["gate_unchanged"] == "skipped"
    first = report["checks"][0]
    assert said in first["rationale"], first["rationale"]
    assert "/learner/" not in first["rationale"]  # the learner's file is named, not the checker's copy of it
    assert report["evidence"] == {} and report["traces"] == {}  # no gate was run


def test_proflab_run_on_a_gate_lab_says_how_to_try_the_settings(lab7_kit):
    proc = lab7_kit.run("run", "7")
    assert proc.returncode == 2
    assert "holds a gate's settings, not a pipeline" in proc.stderr
    assert "proflab gate labs/07_gate/pipeline.py --baseline labs/01_dataloader/original.py --config" \
        in proc.stderr


# --- lab 7 stands alone: it brings the fix it gates ------------------------------------------------------

LAB7 = Path(__file__).resolve().parents[1] / "labs" / "07_gate"


def _code_of(path: Path):
    """A module's code, without its docstring and its ``if __name__ == "__main__"`` block."""
    import ast

    body = ast.parse(path.read_text()).body
    body = [node for node in body[1:] if not (isinstance(node, ast.If) and "__main__" in ast.dump(node.test))]
    return [ast.dump(node) for node in body]


def test_lab_7_sends_no_one_to_another_labs_exercise():
    """Everything lab 7 hands a learner (its tables' comments, its pipeline, its hints, its line in
    `proflab list`) works in a kit where lab 1 was never touched: every file it names is one the kit ships as
    it is, never another lab's exercise (untouched, it is that lab's original), and the pipeline it brings to
    gate is lab 1's fix."""
    import re

    from proflab import labs

    lab = labs.load(LAB7)
    root = LAB7.parents[1]
    assert lab.gating.pipeline, "lab 7 brings the fix it gates"
    pipeline = LAB7 / lab.gating.pipeline
    told = "\n".join([(LAB7 / "exercise.toml").read_text(), (LAB7 / "original.toml").read_text(),
                      pipeline.read_text(), *lab.hints, lab.summary])
    exercises = {other.exercise.resolve() for other in labs.discover(root / "labs") if other.number != lab.number}
    named = set(re.findall(r"labs/[\w./-]+?\.(?:py|toml)\b", told))
    assert "labs/07_gate/pipeline.py" in named, "lab 7 tells how to gate the fix it brings"
    for name in sorted(named):
        assert (root / name).is_file(), f"lab 7 names {name}, which the kit does not ship"
        assert (root / name).resolve() not in exercises, \
            f"lab 7 sends the learner to {name}: another lab's exercise, its original until that lab is done"
    assert "need not" in lab.summary, "`proflab list` says that lab 7 stands alone"
    assert _code_of(pipeline) == _code_of(root / "labs" / "01_dataloader" / "solution.py"), \
        f"{pipeline.name} is lab 1's fix"


# The lab's own try of the settings, as its exercise shows it (the fix it brings against the loader it replaced),
# made cheap: the fix is ~3x faster, far from 1.6x and from 1, so two rounds of four steps call it.
TRY = ["--max-slowdown", "1.6", "--rounds", "2", "--max-rounds", "8", "--timed-steps", "4", "--profile-steps", "2"]


@pytest.fixture(scope="module")
def trial_gate(kit, tmp_path_factory) -> tuple[Kit, int, dict]:
    """`proflab gate` on lab 7's pipeline against lab 1's original, with lab 7's exercise as its settings, in
    a kit where lab 1 was never touched, from the kit's folder."""
    import json

    k = sharing_data(tmp_path_factory.mktemp("lab7-alone"), kit)
    proc = k.run("gate", "labs/07_gate/pipeline.py", "--baseline", "labs/01_dataloader/original.py",
                 "--config", "labs/07_gate/exercise.toml", *TRY, "--json")
    assert proc.stdout.strip(), f"no JSON on stdout; stderr:\n{proc.stderr}"
    return k, proc.returncode, json.loads(proc.stdout)


def test_lab_7_brings_the_fix_it_gates_to_a_learner_who_never_did_lab_1(trial_gate):
    kit, code, report = trial_gate
    assert (kit.lab1 / "exercise.py").read_bytes() == (kit.lab1 / "original.py").read_bytes()  # lab 1 untouched
    assert code == 0, f"{report.get('error')}; {[(c['name'], c['status'], c['rationale']) for c in report['checks']]}"
    # Lab 1's reference fix: it clears lab 1's own threshold (the gate stops once "no regression" is called, so
    # its interval after two rounds may still reach past 1.0; its median is the improvement)
    from proflab import labs

    lab1 = labs.resolve("1", labs.discover(kit.root / "labs"))
    assert report["slowdown"]["median"] < 1 / lab1.threshold("cpu"), \
        f"the fix is an improvement on the original: {report['slowdown']}"
    assert "DataLoader" in report["because"].get("faster", ""), report["because"]


def test_a_gate_on_lab_7s_settings_keeps_its_traces_in_the_kits_runs_folder(trial_gate):
    kit, _, report = trial_gate
    runs = kit.root / "runs" / "gate"  # where the lab's page looks: proflab tensorboard --logdir runs/gate
    assert set(report["traces"]) == {"baseline", "candidate"}, report["traces"]
    for which, trace in report["traces"].items():
        assert Path(trace).parent.resolve() == (runs / which).resolve(), trace
        assert list((runs / which).glob("*.pt.trace.json")), f"no {which} trace in {runs / which}"
    stray = [p.relative_to(kit.root).as_posix() for p in (kit.root / "labs").rglob("*")
             if "runs" in p.relative_to(kit.root).parts]
    assert not stray, f"traces written inside the lab's folder: {stray}"


# --- lab 7's check in TensorBoard: its runs as the report names them, with Scalars, Text and Images ------------

def printed_runs(stdout: str) -> tuple[str, list[str]]:
    """The folder and the run names a check's terminal report gives: ``Traces: runs/ (runs: a, b)``."""
    import re

    found = re.search(r"Traces: (\S+)/ \(runs: ([^)]*)\)", " ".join(stdout.split()))
    assert found, f"no 'Traces: … (runs: …)' line in:\n{stdout}"
    return found[1], found[2].split(", ")


def listed_runs(runs: Path) -> dict[str, set[str]]:
    """The runs TensorBoard lists under ``runs``, as each kind of tab lists them: its own dashboards (any event
    file) by plugin, and the kit's Profile and Trace timeline tabs (any trace)."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer

    from proflab.viewing import timeline

    events = plugin_event_multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(runs))
    events.Reload()
    found = {plugin: set(events.PluginRunToTagToContent(plugin)) for plugin in ("scalars", "text", "images")}
    found["traces"] = set(timeline.newest_traces(runs))
    return found


@pytest.fixture(scope="module")
def gate_check_in_a_terminal(kit, tmp_path_factory) -> tuple[Kit, subprocess.CompletedProcess]:
    """`proflab check 7` as a learner sees it (no --json), with settings that profile, in a kit of its own."""
    k = sharing_data(tmp_path_factory.mktemp("lab7-tensorboard"), kit)
    (k.root / "mine.toml").write_text(CHEAP + "profile_steps = 2\n")
    return k, k.run("check", "7", "--file", "mine.toml")


def test_lab_7s_check_names_its_runs_as_tensorboard_lists_them_and_fills_scalars_text_and_images(
        gate_check_in_a_terminal):
    import urllib.parse

    from proflab.viewing import tensorboard
    from test_tensorboard import free_port
    from test_tensorboard_views import fetch, fetch_json

    kit, proc = gate_check_in_a_terminal
    assert proc.returncode in (0, 1, 4), proc.stdout + proc.stderr
    folder, names = printed_runs(proc.stdout)
    assert folder == "runs", proc.stdout  # `proflab tensorboard` serves runs/: the names are from there
    ran = [g for g in ("unchanged", "regression") if f"07-gate/{g}/candidate" in names]
    assert ran and ran[0] == "unchanged", names
    assert names == sorted(f"07-gate/{g}/{v}" for g in ran for v in ("baseline", "candidate")), names
    for name in names:
        assert list((kit.root / "runs" / name).glob("*.pt.trace.json")), f"no trace in runs/{name}"
    assert not (kit.root / "labs" / "07_gate" / "runs").exists()

    port = free_port()
    server = tensorboard.start(kit.root / "runs", port=port)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # TensorBoard reads the event files in the background
            tags = {plugin: fetch_json(base, f"/data/plugin/{plugin}/tags") for plugin in ("scalars", "text",
                                                                                          "images")}
            if all(set(tags[p]) == set(names) if p == "scalars" else len(tags[p]) == len(ran) for p in tags) \
                    or time.monotonic() > deadline:
                break
            time.sleep(1)
        timeline_runs = fetch_json(base, "/data/plugin/proflab_timeline/runs")
        assert sorted(timeline_runs) == names, "the Profile and Trace timeline tabs list the printed runs"
        assert sorted(tags["scalars"]) == names, "Scalars lists the printed runs"
        for gate in ran:
            rounds = []
            for which in ("baseline", "candidate"):
                run = f"07-gate/{gate}/{which}"
                assert list(tags["scalars"][run]) == ["step_time_ms/07-gate"], tags["scalars"][run]
                points = fetch_json(base, "/data/plugin/scalars/scalars", run=run, tag="step_time_ms/07-gate")
                assert [step for _, step, _ in points] == list(range(len(points))) and points, points
                assert all(value > 0 for _, _, value in points)
                rounds.append(len(points))
            assert rounds[0] == rounds[1] >= 2, f"one mean step a paired round, for each version: {rounds}"
            run = f"07-gate/{gate}/candidate"
            text = fetch_json(base, "/data/plugin/text/text", run=run, tag="checker_report/text_summary")[0]["text"]
            assert "Lab 7 · Keep it fast" in text and f"<strong>{gate}</strong> gate" in text, text
            for title in ("Passes the unchanged fix", "Catches the regression", "Names the cause"):
                assert title in text, text
            assert sorted(tags["images"][run]) == ["step_times", "where_the_time_went"], tags["images"]
            for tag in ("step_times", "where_the_time_went"):
                sample = fetch_json(base, "/data/plugin/images/images", run=run, tag=tag, sample=0)[0]
                png = fetch(base, "/data/plugin/images/individualImage?" + sample["query"])
                assert png.startswith(b"\x89PNG") and len(png) > 10_000, urllib.parse.unquote(sample["query"])
    finally:
        tensorboard.stop(server)


def test_a_later_check_that_runs_fewer_gates_leaves_only_its_own_runs_listed(gate_check_in_a_terminal):
    """A check whose first gate fails (a limit the unchanged fix cannot be called under in two rounds) runs no
    second gate: TensorBoard must not go on listing the earlier check's regression runs beside its own."""
    kit, first = gate_check_in_a_terminal
    (kit.root / "tight.toml").write_text(CHEAP.replace("max_slowdown = 1.6", "max_slowdown = 1.05")
                                         .replace("max_rounds = 8", "max_rounds = 2") + "profile_steps = 2\n")
    proc = kit.run("check", "7", "--file", "tight.toml")
    assert proc.returncode in (0, 1, 4), proc.stdout + proc.stderr
    _, names = printed_runs(proc.stdout)
    listed = listed_runs(kit.root / "runs")
    assert listed["traces"] == listed["scalars"] == set(names), (names, listed)
    assert listed["text"] == listed["images"] == {n for n in names if n.endswith("/candidate")}, (names, listed)
