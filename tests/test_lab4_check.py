"""``proflab check 4`` end to end on this machine's CPU: real subprocesses, real timings.

As for the other labs, speed is never asserted against a fixed number of
milliseconds, only the checker's verdicts and what it reports. The round-trip
counts are exact: the same code reads the same values on any machine.
"""

from __future__ import annotations

import json

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, failing, statuses, explain
from proflab import labs


def lab4_folder(kit):
    return kit.root / "labs" / "04_syncs"


def test_reference_solution_passes(lab4_solution):
    code, report = lab4_solution
    assert code == 0, explain(report)
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    assert report["comparison"]["speedup"] >= report["threshold"] == labs.resolve("4").threshold("cpu")


def test_reference_reads_once_per_log_interval(lab4_solution):
    _, report = lab4_solution
    ev = report["evidence"]
    assert ev["metric"] == "host_syncs"
    # The original reads the loss twice (.item()) and three tensors (.tolist()) at every step.
    assert ev["original"]["details"]["item()"] == 2
    assert ev["original"]["details"]["tolist()"] == 3
    assert ev["original"]["value"] == 5
    # The fix: one .tolist() in the 10 profiled steps, which hold one log step.
    assert ev["learner"]["value"] == pytest.approx(0.1)
    assert "item()" not in ev["learner"]["details"]
    faster = next(c for c in report["checks"] if c["name"] == "evidence")
    assert "5 round trips per step" in faster["actual"] and "0.1 round trips per step" in faster["actual"]


@pytest.mark.load_free
def test_untouched_exercise_fails(fresh_kit):
    code, report = fresh_kit.check_json("syncs")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("host round trips per step is still 5")
    assert "aten::item" in evidence["help"]


@pytest.mark.load_free
def test_dropping_the_confusion_matrix_fails_on_results(fresh_kit):
    code, report = fresh_kit.check_json("4", "--file", str(LEARNER_FILES / "lab4_no_confusion.py"))
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    same = failing(report)
    assert same["rationale"].startswith("step 9 yields no 'confusion'")
    assert "confusion matrix" in same["help"]


def _trace(tmp_path, events):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _ev(name, ts, dur, cat, tid=1):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_host_syncs_on_cpu_counts_item_and_tolist_reads(tmp_path):
    from proflab.measuring import evidence

    events = [
        _ev("ProfilerStep#1", 0, 100, "user_annotation"),
        _ev("aten::item", 10, 5, "cpu_op"), _ev("aten::_local_scalar_dense", 11, 2, "cpu_op"),  # .item()
        _ev("aten::resolve_conj", 20, 1, "cpu_op"), _ev("aten::resolve_neg", 22, 1, "cpu_op"),  # .tolist()
        _ev("aten::is_nonzero", 30, 5, "cpu_op"), _ev("aten::item", 31, 3, "cpu_op"),
        _ev("aten::_local_scalar_dense", 32, 1, "cpu_op"),  # `if t:`
        _ev("aten::matmul", 40, 10, "cpu_op"), _ev("aten::resolve_neg", 41, 1, "cpu_op"),  # inside an op: not a read
        _ev("ProfilerStep#2", 100, 100, "user_annotation"),
        _ev("aten::resolve_neg", 150, 1, "cpu_op"),
        _ev("aten::item", 210, 5, "cpu_op"), _ev("aten::_local_scalar_dense", 211, 2, "cpu_op"),  # after the steps
    ]
    m = evidence.measure("host_syncs", _trace(tmp_path, events))
    assert m.value == 2.0  # (2 item() + 1 tolist()) + 1 tolist(), over 2 steps
    assert m.details["item()"] == 1.0 and m.details["tolist()"] == 1.0
    assert "2 round trips per step" in m.summary


# Each spelling of a read into Python (or of a size that depends on values), and what is not one.
SPELLINGS = {
    "x.sum().item()": 1, "(y == 1).nonzero().shape[0]": 1, "torch.isnan(x).nonzero().numel()": 1,
    "x[x > 0].sum()": 1, "torch.where(x > 0)[0]": 1, "torch.argwhere(x > 0)": 1, "torch.unique(y)": 1,
    "torch.equal(x, x)": 1, "f'{x.sum():.3f}'": 1, "torch.masked_select(x, x > 0)": 1,
    "bool(x.sum() > 0)": 1, "y.tolist()": 1,
    "y.shape[0]": 0, "torch.nonzero_static(x > 0, size=8)": 0, "x.sum() / y.numel()": 0,
    "torch.repeat_interleave(y, 2)": 0,
}


@pytest.mark.parametrize("code", SPELLINGS)
def test_host_syncs_counts_a_read_however_it_is_spelled(tmp_path, code):
    """Under the real profiler: a read spelled as a shape (nonzero, x[mask], unique) counts like .item()."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from proflab.measuring import evidence

    x, y = torch.randn(64), torch.randint(0, 5, (64,))
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            eval(code)  # noqa: S307  (the spelling under test)
            prof.step()
    m = evidence.measure("host_syncs", path)
    assert m.value == SPELLINGS[code], m.summary


def test_host_syncs_on_cuda_counts_the_calls_that_wait(tmp_path):
    from proflab.measuring import evidence

    events = [
        _ev("ProfilerStep#1", 0, 100, "user_annotation"),
        _ev("cudaLaunchKernel", 5, 2, "cuda_runtime"),
        _ev("cudaMemcpyAsync", 10, 2, "cuda_runtime"), _ev("cudaStreamSynchronize", 13, 20, "cuda_runtime"),
        _ev("cudaDeviceSynchronize", 40, 30, "cuda_runtime"),
        _ev("Memcpy DtoH (Device -> Pageable)", 20, 2, "gpu_memcpy", tid=7),
        _ev("ProfilerStep#2", 100, 100, "user_annotation"),
        _ev("void at::native::vectorized_elementwise_kernel", 150, 5, "kernel", tid=7),
    ]
    m = evidence.measure("host_syncs", _trace(tmp_path, events))
    assert m.value == 1.0  # 2 waits over 2 steps
    assert m.details["cudaStreamSynchronize"] == 0.5 and m.details["cudaDeviceSynchronize"] == 0.5
    assert m.details["dtoh_copies_per_step"] == 0.5
    assert "device-to-host copies" in m.summary


def test_run_prints_the_host_reads_the_table_may_leave_out(fresh_kit):
    proc = fresh_kit.run("run", "4", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines()
                if line.startswith("Host reads per profiled step, outside data loading:"))
    assert "item()" in line and "tolist()" in line and "Profile › Operators" in line
    assert "Inside data loading" not in proc.stdout  # lab 4 loads no data in its step: every read is the step's
