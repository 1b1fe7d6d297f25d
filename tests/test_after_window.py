"""What a run does outside its timed window counts where it went: after the window, and between its last
profiled step and its trace's fingerprint (the profiler's stop and the trace's writing, "Q" to "H"), beyond
what the original spends there. Recorded marks and figures; no lab runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from proflab.grading import measures
from proflab.running import marks
from proflab.running.execute import Outcome
from proflab.running.spec import RunSpec

SPEC = RunSpec(file="lab.py", result_path="result.json", warmup_steps=2, timed_steps=2, profile_steps=2)
CALIBRATION = Path(__file__).resolve().parent / "calibration"


@pytest.fixture(scope="module")
def calibration_lab():
    """A lab profiled by the kit (not lab 0), with no start-up allowance: the calibration lab's manifest."""
    from proflab import labs

    lab = labs.load(CALIBRATION)
    assert lab.profiling is None and lab.workload.startup_s == 0.0
    return lab


def outside(gap_s: float, gap_cpu_s: float) -> dict:
    """A run's figures, as the checker reads them from its stamps: a profiled run whose trace's fingerprint
    came ``gap_s`` after its last profiled step (``gap_cpu_s`` of CPU)."""
    m = marks.Marks()
    q = 1.6
    m.stamps = [("B", 0.0), ("W", 1.0), ("W", 1.1), ("S", 1.1), ("T", 1.2), ("T", 1.3), ("E", 1.3),
                ("P", 1.4), ("Q", 1.5), ("P", 1.5), ("Q", q), ("H", q + gap_s)]
    m.total = {"B": 0.0, "W": 1.0, "S": 1.1, "E": 1.3, "P": 1.4, "Q": q, "H": q + gap_cpu_s}
    m.exited, m.final_cpu = q + gap_s + 0.2, q + gap_cpu_s + 0.2
    run = Outcome("learner", Path("x.py"), "ok", {"window_s": 0.2, "step_s": [0.1, 0.1]})
    marks._from_outside(run, m, SPEC, True)
    assert run.ok, run.result
    return run.result


def test_the_gap_between_the_last_profiled_step_and_the_trace_is_read_apart():
    """Not the time after the window (the trace's writing grows with the trace), nor left out: its own figure."""
    r = outside(2.0, 1.9)
    assert r["trace_gap_s"] == pytest.approx(2.0) and r["cpu_trace_gap_s"] == pytest.approx(1.9)
    assert r["after_s"] == pytest.approx(0.1 + 0.2) and r["cpu_after_s"] == pytest.approx(0.1 + 0.2)


def profiled(gap_s: float, trace_bytes: int, steps: int = 6) -> Outcome:
    return Outcome("x", Path("x.py"), "ok", {"trace_gap_s": gap_s, "cpu_trace_gap_s": gap_s,
                                             "trace_bytes": trace_bytes, "after_s": 0.1, "cpu_after_s": 0.1},
                   steps_asked=steps)


@pytest.mark.parametrize("figure", ["wall_time", "cpu_time"])
def test_work_moved_into_the_gap_counts_beyond_the_originals_for_a_trace_of_its_size(figure, calibration_lab):
    originals = [profiled(0.30, 2_000_000), profiled(0.32, 2_000_000), profiled(0.31, 2_000_000)]
    after = measures.after_allowance(calibration_lab, originals, figure)
    assert after[measures.TRACE_GAP] == [pytest.approx(0.31), 2_000_000]
    # a sound fix: as long as the original there, or shorter with a smaller trace: nothing counted
    assert measures.gap_excess_s(profiled(0.33, 2_000_000), after, figure) == 0.0
    assert measures.gap_excess_s(profiled(0.31, 500_000), after, figure) == 0.0
    # a trace three times the size takes about three times as long to write: allowed
    assert measures.gap_excess_s(profiled(0.95, 6_000_000), after, figure) == 0.0
    # three seconds of the steps' work done there, with a trace of the original's size: counted
    moved = profiled(3.3, 2_000_000)
    assert measures.gap_excess_s(moved, after, figure) == pytest.approx(3.3 - (0.31 * 1.1 + 0.05))
    assert measures.after_excess_s(moved, after, figure) == pytest.approx(3.3 - (0.31 * 1.1 + 0.05))
    plain = measures.counted_step_s(Outcome("x", Path("x.py"), "ok", {
        "span_s": 1.0, "compile_s": 0.0, "first_step_s": 0.0, "counted_steps": 10, "cpu_span_s": 1.0,
        "cpu_compile_s": 0.0, "first_step_cpu_s": 0.0, **moved.result}, steps_asked=6), 0.0, figure, after)
    assert plain == pytest.approx((1.0 + 3.3 - (0.31 * 1.1 + 0.05)) / 10)


def test_a_run_without_a_trace_has_no_gap_to_count(calibration_lab):
    originals = [profiled(0.30, 2_000_000)]
    after = measures.after_allowance(calibration_lab, originals)
    later = Outcome("x", Path("x.py"), "ok", {"after_s": 0.0}, steps_asked=4)  # unprofiled: no "Q", no "H"
    assert measures.gap_excess_s(later, after) == 0.0
    assert measures.gap_excess_s(profiled(5.0, 2_000_000), {}) == 0.0  # nothing of the original's to go by


def test_a_runs_spec_is_read_back_as_it_was_written_and_nothing_else(tmp_path):
    """The spec the checker writes for a run is the one the run reads: a key it does not know, or a value of
    another kind, is refused, not guessed at."""
    import json

    import pytest

    spec = RunSpec(file="lab.py", result_path="r.json", params={"lr": 0.1}, nproc=2, mark_fifo="m-{rank}")
    spec.write(tmp_path / "spec.json")
    assert RunSpec.read(tmp_path / "spec.json") == spec
    assert spec.for_rank(1).mark_fifo == "m-1" and spec.for_rank(1).params == {"lr": 0.1}
    for changed, said in (({"compile_credit": True}, "unknown key(s) compile_credit"),
                          ({"timed_steps": "10"}, "timed_steps = '10'"), ({"handout": 1}, "handout = 1")):
        (tmp_path / "bad.json").write_text(json.dumps({**json.loads((tmp_path / "spec.json").read_text()), **changed}))
        with pytest.raises(ValueError) as e:
            RunSpec.read(tmp_path / "bad.json")
        assert said in str(e.value)
