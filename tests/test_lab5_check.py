"""``proflab check 5`` end to end on this machine's CPU: real subprocesses, real memory.

Lab 5 is graded on memory: its fourth check compares the peak memory of each
run, which the checker samples from outside the run's process (``/proc``), and
its evidence is what the profiled steps leave allocated, block by block, from
the ``[memory]`` events of ``profile_memory``. No figure is asserted against a
fixed number of megabytes measured here, only verdicts, and the relations the
lab is built on (the original keeps memory, a fix keeps none).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import LEARNER_FILES, explain, failing, learner_files, statuses

LEANER_CHAIN = ["runs", "same_results", "evidence", "leaner"]  # lab 5's last check is its own


def test_reference_solution_passes_on_memory(lab5_solution):
    code, report = lab5_solution
    assert code == 0, explain(report)
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(LEANER_CHAIN, "passed")
    leaner = report["checks"][3]
    assert leaner["title"] == "Leaner" and "of the original's" in leaner["rationale"]
    memory = report["memory"]
    assert memory["share"] == 0.45 and "/proc" in memory["measured"]
    # Every unprofiled round's pair, read from outside: the fix's peak is below the lab's share of the original's.
    assert len(memory["original"]) == len(memory["learner"]) >= 2
    assert len(memory["runs"]["learner"]) == len(memory["learner"]) + 1  # the profiled first round left out
    assert all(m < 0.45 * o for o, m in zip(memory["original"], memory["learner"]))
    assert all(run["samples"] > 10 for run in memory["runs"]["learner"])
    assert "device_original" not in memory  # no device here, nothing read from a driver
    assert report["comparison"]["ci_low"] >= report["threshold"] == pytest.approx(1 / 0.45)


def test_reference_keeps_no_memory_per_step(lab5_solution):
    _, report = lab5_solution
    ev = report["evidence"]
    assert ev["metric"] == "memory_growth" and ev["unit"] == "MB per step"
    # The original keeps one evaluation's graph every 4 steps; the operators that saved it are named.
    assert ev["original"]["value"] > 5
    assert any(key.startswith("kept:aten::") for key in ev["original"]["details"])
    assert ev["learner"]["value"] < 0.5
    assert "never freed" in ev["learner"]["summary"]


@pytest.mark.load_free
def test_untouched_exercise_fails_on_the_evidence(fresh_kit):
    code, report = fresh_kit.check_json("memory")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "leaner": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("memory kept per step is still")
    assert "Profile › Memory" in evidence["help"] and "most from aten::" in evidence["actual"]


VARIANTS = ["lab5_inference_mode.py", "lab5_detach.py", "lab5_no_grad_function.py", "lab5_gc_collect.py", "lab5_empty_cache.py",
            "lab5_keeps_early.py", "lab5_eval_less.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory):
    """The learner files below, checked in one batch (conftest.Batch)."""
    return learner_files(kit, tmp_path_factory, "5", VARIANTS)


@pytest.mark.parametrize("variant", ["lab5_inference_mode.py", "lab5_detach.py", "lab5_no_grad_function.py"])
def test_sound_alternatives_pass(batch, variant):
    """inference_mode with float() histories; and no no_grad at all, only detached histories."""
    code, report = batch.decided("5", "5", LEARNER_FILES / variant)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(LEANER_CHAIN, "passed")


@pytest.mark.parametrize("variant, call", [("lab5_gc_collect.py", "gc.collect"),
                                           ("lab5_empty_cache.py", "empty_cache")])
def test_collecting_garbage_is_not_a_fix_and_is_told_why(batch, variant, call):
    code, report = batch.report("5", LEARNER_FILES / variant)
    assert code == 1
    assert statuses(report)["evidence"] == "failed"
    evidence = failing(report)
    assert evidence["help"].startswith(f"{call}: ") and "frees" in evidence["help"]
    assert "referenced" in evidence["help"] or "in use" in evidence["help"]


def test_a_leak_kept_out_of_the_profiled_steps_fails_on_the_peak(batch):
    """The first four evaluations' graphs kept for good: the trace, taken at the end, shows nothing kept,
    and the peak read from outside the run still holds them."""
    code, report = batch.decided("5", "5", LEARNER_FILES / "lab5_keeps_early.py")
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "passed",
                                "leaner": "failed"}
    leaner = failing(report)
    assert leaner["title"] == "Leaner" and "more than the 45% this lab allows" in leaner["rationale"]
    assert "unprofiled runs" in leaner["actual"]


def test_evaluating_less_often_fails_on_results(batch):
    code, report = batch.report("5", LEARNER_FILES / "lab5_eval_less.py")
    assert code == 1
    same = failing(report)
    assert same["name"] == "same_results" and same["rationale"].startswith("step 3 yields no 'val_loss'")
    assert "evaluating less often is not a fix" in same["help"]


def test_proflab_run_profiles_memory_and_says_what_each_step_keeps(fresh_kit):
    proc = fresh_kit.run("run", "memory", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert 'sort_by="self_cpu_memory_usage"' in out and "Self CPU Mem" in out
    assert "Memory left allocated per profiled step:" in out and "MB per step kept on cpu" in out
    assert "Peak memory of the run, read from outside it" in out


# --- what is measured, on traces and processes made here --------------------------

def _trace(tmp_path, events):
    from proflab.measuring import evidence

    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return evidence.load(path)


def _step(n, ts, dur=100):
    return {"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def _op(name, ts, dur):
    return {"ph": "X", "name": name, "cat": "cpu_op", "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def _mem(ts, addr, size, total, device_type=0):
    return {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1, "s": "t",
            "args": {"Addr": addr, "Bytes": size, "Total Allocated": total, "Device Type": device_type,
                     "Device Id": 0 if device_type else -1}}


MB = 2**20


def test_kept_memory_counts_blocks_never_freed_by_their_operator(tmp_path):
    from proflab.measuring import memory

    events = [_step(1, 0), _step(2, 100), _step(3, 200),
              _op("aten::addmm", 10, 20), _mem(15, 1, 8 * MB, 8 * MB),  # kept: never freed
              _op("aten::gelu", 40, 10), _mem(45, 2, 2 * MB, 10 * MB),  # freed in the next step
              _mem(150, 2, -2 * MB, 8 * MB),
              _op("aten::mm", 250, 10), _mem(255, 3, 4 * MB, 12 * MB),  # the last step's: not counted
              _mem(260, 99, -5 * MB, 7 * MB)]  # a block allocated before profiling: ignored
    trace = _trace(tmp_path, events)
    m = memory.growth(trace)
    assert m.value == pytest.approx(4.0)  # 8 MB over the 2 steps before the last
    assert m.details["kept:aten::addmm"] == pytest.approx(4.0) and "kept:aten::gelu" not in m.details
    assert "most from aten::addmm 4.0 MB" in m.summary
    view = memory.curve(trace)
    assert view["devices"]["cpu"]["kept_mb_per_step"] == pytest.approx(4.0)
    assert view["devices"]["cpu"]["step_end_mb"] == [10.0, 8.0, 7.0]


def test_a_trace_without_memory_events_is_said_so_never_read_as_zero(tmp_path):
    from proflab.measuring import evidence, memory

    trace = _trace(tmp_path, [_step(1, 0), _step(2, 100), _op("aten::mm", 10, 5)])
    with pytest.raises(evidence.TraceError, match="no memory events"):
        memory.growth(trace)
    assert memory.curve(trace)["recorded"] is False


def test_the_device_where_most_is_kept_is_graded(tmp_path):
    from proflab.measuring import memory

    events = [_step(1, 0), _step(2, 100), _mem(10, 1, 1 * MB, 1 * MB), _mem(20, 7, 30 * MB, 30 * MB, 1)]
    m = memory.growth(_trace(tmp_path, events))
    assert m.value == pytest.approx(30.0) and "on cuda:0" in m.summary


def test_a_figure_that_cannot_be_read_is_none_never_zero(monkeypatch):
    """No driver figure (no nvidia-smi, or "[N/A]" under MIG) leaves the device peak unread: the run's own
    report is kept, never graded; a process whose memory could not be read has no host peak either."""
    from proflab.running import memory

    watch = memory.Watch(members=[])
    figures = watch.figures("cuda", 2048.0)
    assert figures["peak_mb"] is None and figures["device_peak_mb"] is None
    assert figures["device_graded"] and figures["reported_device_mb"] == 2048.0
    monkeypatch.setattr(memory, "_ask", lambda command: [["123", "[N/A]"]] if "--query-compute-apps" in command[1]
                        else [["[N/A]"]])
    watch = memory.Watch(members=[123])
    watch.device = memory.DeviceWatch(watch)
    watch.device.sample()
    assert watch.device.peak_mb is None and watch.figures("cuda", None)["device_peak_mb"] is None
    monkeypatch.setattr(memory, "_ask", lambda command: [["123", "1500"]] if "--query-compute-apps" in command[1]
                        else [["3000"]])
    watch.device.sample()
    figures = watch.figures("cpu", None)  # the run says cpu, the driver saw its memory: graded anyway
    assert figures["device_peak_mb"] == 1500.0 and figures["device_graded"]


def test_not_a_fix_is_told_for_calls_the_original_does_not_make(tmp_path):
    from proflab import labs
    from proflab.grading.checks import evidence

    lab = labs.resolve("memory")
    said = tmp_path / "a.py"
    said.write_text("# torch.cuda.empty_cache() would not help here\nfrom gc import collect\ncollect()\n")
    found = evidence.not_a_fix(lab, said)
    assert [line.split(":")[0] for line in found] == ["gc.collect"]  # a comment is no call
    assert evidence.not_a_fix(lab, lab.original) == []


def test_the_peak_is_seen_from_outside_even_when_the_process_resets_its_high_water_mark():
    """A process that holds 300 MB, resets VmHWM through /proc/self/clear_refs and frees it: the samples
    taken while it held the memory still count it."""
    from proflab.running import memory

    code = textwrap.dedent("""
        import time
        block = bytearray(300 * 2**20)
        time.sleep(0.4)
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        del block
        time.sleep(0.3)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    watch = memory.Watch(members=[proc.pid])
    while proc.poll() is None:
        watch.sample()
        time.sleep(memory.SAMPLE_S)
    assert proc.returncode == 0
    assert watch.samples > 10
    assert watch.rss_peak_kb / 1024 > 300
    figures = watch.figures("cpu", None)
    assert figures["peak_mb"] > 300 and "/proc" in figures["measured"]
    assert watch.figures("cuda", 99.0)["device_peak_mb"] is None  # no figure from the driver: none is taken


def test_a_class_record_gives_the_peak_share_not_a_speed_up(lab5_solution):
    """``proflab grade``'s JSON record and summary of a lab graded on memory, from the reference's real report."""
    from proflab import labs
    from proflab.grading.checks import Report
    from proflab.grading.grade import Graded, Points, Submission
    from proflab.reporting import grade_formats, report as check_report

    _, data = lab5_solution
    r = Report.from_dict(data)
    lab = labs.resolve("memory")
    graded = Graded(Submission("ada", lab, lab.solution, "ada/5.py"), r,
                    [Points(c.name, 1.0, 1.0) for c in r.checks])
    record = grade_formats.submission_record(graded)
    assert record["peak_share"] == pytest.approx(1 / record["speedup"], rel=1e-3)
    assert record["peak_share"] < 0.45
    assert record["memory"]["original"] and record["memory"]["learner"]
    assert check_report.peak_share(r).startswith("peak ") and "of the original's (at most 45%)" in check_report.peak_share(r)
    assert "Peak memory:" in check_report.to_markdown(r) and "Speed-up" not in check_report.to_markdown(r)


@pytest.mark.parametrize("host, decision", [
    ([2050.0, 2030.0, 2061.0], "pass"),  # the host as the original's, the device at 12%: a fix
    ([3480.0, 3510.0, 3495.0], "fail"),  # the graphs moved to the host: still a leak
])
def test_on_cuda_the_device_holds_the_leak_and_the_host_may_not_take_it_over(host, decision):
    """On CUDA the CUDA context and the data set dominate the host's peak in every version: the host is held
    to the original's (within 10%), the device to the lab's share. No GPU needed: the peaks are given."""
    from proflab import labs
    from proflab.grading.checks import leaner
    from proflab.grading.verdicts import Report

    lab = labs.resolve("memory")
    report = Report(lab=lab.name, number=lab.number, title=lab.title, file="f.py", label="f", device="cuda")
    report.memory = {"original": [2010.0, 2000.0, 2022.0], "learner": host,
                     "device_original": [1210.0, 1190.0, 1205.0], "device_learner": [150.0, 152.0, 149.0]}
    assert leaner.memory_decision(lab, report)[:2] == (decision, "host")  # the host is the closer call

