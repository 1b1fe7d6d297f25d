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


def steps_trace(mm_us: list[float], calls: int = 1, relu_us: float = 50.0):
    """Profiled steps of 1000 µs, each with ``calls`` aten::mm of ``mm_us[step]`` µs in all and a relu."""
    events = []
    for step, mm in enumerate(mm_us):
        start = 10_000 * (step + 1)
        events.append(x(f"ProfilerStep#{step}", "user_annotation", start, 1000))
        for call in range(calls):
            events.append(x("aten::mm", "cpu_op", start + 10 + call * 300, mm / calls))
        events.append(x("aten::relu", "cpu_op", start + 900, relu_us))
    return evidence.from_data("steps.pt.trace.json", {"traceEvents": events})


def moved(before, after, noise=0.0):
    return {c.name: c.status for c in operators.diff(before, after, noise)
            if c.status != "same" and c.name != operators.STEP}  # the step itself, as the gate leaves it out


def test_a_move_within_what_an_operator_varies_from_step_to_step_is_no_change():
    """Two runs of one file on a busy machine: aten::mm's mean moved by 6% of the step, but its steps
    vary that much within each run: nothing changed. The same move with steady steps is a change."""
    noisy_a, noisy_b = [300, 420, 240, 380, 330], [390, 300, 470, 360, 460]  # means 334 and 396
    assert moved(steps_trace(noisy_a), steps_trace(noisy_b)) == {}
    assert moved(steps_trace([334] * 5), steps_trace([396] * 5)) == {"aten::mm": "grown"}


def test_a_move_within_the_rounds_noise_is_no_change_and_a_change_in_calls_always_is():
    assert moved(steps_trace([300] * 5), steps_trace([330] * 5), noise=0.06) == {}  # 10% within 2 × 6%
    assert moved(steps_trace([300] * 5), steps_trace([400] * 5), noise=0.06) == {"aten::mm": "grown"}
    assert moved(steps_trace([300] * 5), steps_trace([300] * 5, calls=2), noise=0.5) == {"aten::mm": "grown"}


def test_a_profile_slowed_all_over_by_a_busy_machine_shows_no_change_but_the_operator_that_grew_does():
    """A profile taken while a neighbour held the core: every operator 20% slower, the step too. Nothing
    moved beyond the step. A real regression: aten::mm doubled, the relu the same: only aten::mm moved."""
    def trace(mm, relu, step):
        events = []
        for i in range(5):
            start = 10_000 * (i + 1)
            events += [x(f"ProfilerStep#{i}", "user_annotation", start, step),
                       x("aten::mm", "cpu_op", start + 10, mm), x("aten::relu", "cpu_op", start + 10 + mm, relu)]
        return evidence.from_data("t.pt.trace.json", {"traceEvents": events})

    assert moved(trace(600, 300, 1000), trace(720, 360, 1200)) == {}
    assert moved(trace(600, 300, 1000), trace(1200, 300, 1600)) == {"aten::mm": "grown"}
