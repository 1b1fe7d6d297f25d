"""``proflab check 3`` end to end on this machine's CPU: real subprocesses, real timings.

As for labs 1 and 2, speed is never asserted against a fixed number of
milliseconds, only the checker's verdicts and what it reports. The operator
counts are exact: the same code runs the same operators on any machine.
"""

from __future__ import annotations

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, explain, failing, learner_files, statuses
from proflab import labs


def lab3_folder(kit):
    return kit.root / "labs" / "03_fusion"


FILES = ['lab3_compile.py', 'lab3_mix.py', 'lab3_no_mask.py']


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory):
    """The learner files below, checked in one batch (conftest.Batch)."""
    return learner_files(kit, tmp_path_factory, "3", FILES)


def grade(batch, name: str) -> tuple[int, dict]:
    return batch.decided("3", "3", LEARNER_FILES / name)


def test_reference_solution_passes(lab3_solution):
    code, report = lab3_solution
    assert code == 0, explain(report)
    assert report["verdict"] == "passed"
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    cmp = report["comparison"]
    assert cmp["speedup"] >= report["threshold"] == labs.resolve("3").threshold("cpu")
    assert cmp["rounds"] >= 2  # the lab's base rounds


def test_reference_reads_far_fewer_elements_outside_matrix_products(lab3_solution):
    _, report = lab3_solution
    ev = report["evidence"]
    assert ev["metric"] == "elementwise_traffic"
    original, learner = ev["original"], ev["learner"]
    assert learner["value"] <= 0.5 * original["value"]
    # The hand-written softmax walks the (batch × heads × T × T) scores with a subtraction, an exp and a
    # division, forward and backward; the fused block never builds them.
    scores = 4 * 4 * 256 * 256
    assert original["details"]["aten::div"] >= scores
    assert original["details"]["aten::exp"] >= scores
    assert "aten::exp" not in learner["details"]
    assert learner["details"].get("aten::div", 0) < scores


@pytest.mark.load_free
def test_untouched_exercise_fails(fresh_kit):
    code, report = fresh_kit.check_json("fusion")
    assert code == 1
    assert report["verdict"] == "failed"
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("elements read per step outside matrix products is still")
    assert "layer_norm" in evidence["help"]


def test_torch_compile_fix_passes(batch):
    code, report = grade(batch, "lab3_compile.py")
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    assert report["evidence"]["learner"]["value"] <= 0.5 * report["evidence"]["original"]["value"]


def test_mixed_fix_passes(batch):
    """The fused attention built-in for attention, torch.compile for the hand-written rest."""
    code, report = grade(batch, "lab3_mix.py")
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")


def test_dropped_causal_mask_fails_on_results(batch):
    code, report = grade(batch, "lab3_no_mask.py")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    same = failing(report)
    assert same["rationale"].startswith("step 0:")
    assert "is_causal=True" in same["help"]


def test_op_count_counts_outermost_non_view_aten_ops(tmp_path):
    """A hand-made CPU trace: nested ops count once, views do not count, nor do ops outside the steps."""
    import json

    from proflab.measuring import evidence

    def op(name, ts, dur, cat="cpu_op", tid=1):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("aten::linear", 10, 10), op("aten::t", 11, 1), op("aten::addmm", 13, 5),  # one op
        op("aten::reshape", 30, 4), op("aten::view", 31, 1),  # a view: not counted
        op("aten::mul", 40, 1), op("aten::add", 42, 1),
        op("ProfilerStep#2", 100, 100, cat="user_annotation"),
        op("aten::layer_norm", 110, 10), op("aten::native_layer_norm", 111, 8),
        op("aten::mul", 250, 1),  # after the last step: not counted
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = evidence.measure("op_count", path)
    assert m.value == 2.0  # (3 + 1) / 2
    assert m.details["aten::linear"] == 0.5 and m.details["aten::mul"] == 0.5
    assert "aten::addmm" not in m.details and "aten::reshape" not in m.details
    assert "aten ops per step" in m.summary


def test_op_count_on_cuda_counts_kernel_launches_inside_steps(tmp_path):
    """On a CUDA trace: the host's launches in each step, not the kernels (they run later, past the step)."""
    import json

    from proflab.measuring import evidence

    def ev(name, ts, dur, cat, tid=1):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    events = [
        ev("ProfilerStep#1", 0, 100, "user_annotation"),
        ev("aten::mul", 10, 5, "cpu_op"), ev("cudaLaunchKernel", 11, 2, "cuda_runtime"),
        ev("cuLaunchKernel", 20, 2, "cuda_driver"),  # a Triton kernel from torch.compile
        ev("cudaMemcpyAsync", 30, 2, "cuda_runtime"),  # a copy is not a kernel launch
        ev("ProfilerStep#2", 100, 100, "user_annotation"),
        ev("cudaLaunchKernelExC", 110, 2, "cuda_runtime"),
        ev("void at::native::elementwise_kernel", 150, 30, "kernel", tid=7),
        ev("void at::native::reduce_kernel", 205, 30, "kernel", tid=7),  # runs after the last step
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = evidence.measure("op_count", path)
    assert m.value == 1.5  # (2 + 1) launches over 2 steps
    assert "kernel launches per step" in m.summary
