"""The operator table built from a trace, on the shape of events a CUDA profile writes.

No GPU is needed to read a CUDA trace: these events have the names, categories
and links (a runtime call's ``correlation``, an operator's ``External id``)
that kineto writes, so the device column is checked here on every machine.
"""

from __future__ import annotations

from proflab.measuring import evidence, operators


def x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def cuda_trace():
    return evidence.from_data("cuda.pt.trace.json", {"traceEvents": [
        x("aten::mm", "cpu_op", 5, 10, **{"External id": 1}),  # before the step: not in the table
        x("cudaLaunchKernel", "cuda_runtime", 6, 2, correlation=100, **{"External id": 1}),
        x("ProfilerStep#1", "user_annotation", 100, 100),
        x("aten::linear", "cpu_op", 110, 40, **{"External id": 2}),
        x("aten::addmm", "cpu_op", 112, 30, **{"External id": 3}),
        x("cudaLaunchKernel", "cuda_runtime", 115, 5, correlation=200, **{"External id": 3}),
        x("gemm_kernel", "kernel", 7, 50, tid=7, correlation=100),  # launched before the step
        x("gemm_kernel", "kernel", 1_500_000, 80, tid=7, correlation=200),  # queued: runs 1.5 s after the step
    ]})


def test_self_cpu_subtracts_direct_children_on_the_thread():
    rows = {r.name: r for r in operators.table(cuda_trace())}
    assert rows["aten::linear"].self_cpu_us == 10 and rows["aten::linear"].cpu_total_us == 40
    assert rows["aten::addmm"].self_cpu_us == 25  # less its cudaLaunchKernel
    assert rows[operators.STEP].self_cpu_us == 60 and "aten::mm" not in rows


def test_device_time_goes_to_the_operator_that_launched_it_in_the_steps():
    rows = {r.name: r for r in operators.table(cuda_trace())}
    assert rows["aten::addmm"].self_device_us == 80  # however late the kernel ran on the device
    assert rows["aten::linear"].self_device_us == 0
    assert sum(r.self_device_us for r in rows.values()) == 80  # the kernel launched before the step is not counted
