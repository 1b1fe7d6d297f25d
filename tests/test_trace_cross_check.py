"""The evidence's trace held to the profiled steps the checker stamped from outside (``checks/evidence.py``).

A real trace of three profiled steps (the kit's schedule: one step warms the profiler up, three are recorded),
read against stamps as the checker would take them: the same steps; steps far longer than the trace's (a
trace of other, cheaper steps: its figures are not the run's, and it fails); the stamps of a checker that a
busy machine kept off the CPU, which reads a step's two marks together (a trace longer than its stamps shows
more work, never less: it passes); a trace with a step too few.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from proflab import labs
from proflab.grading.checks import evidence as evidence_check
from proflab.grading.verdicts import FAILED, Check
from proflab.measuring import evidence

STEP_S = 0.012  # each profiled step: a matrix product, then a wait


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[evidence.Trace, list[float]]:
    """A trace of three recorded steps, and each of the four profiled steps' length as this loop timed it."""
    out = tmp_path_factory.mktemp("cross-check")
    lengths = []
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(4):
            began = time.perf_counter()
            (x @ x).sum()
            time.sleep(STEP_S)
            prof.step()
            lengths.append(time.perf_counter() - began)
    (found,) = out.glob("*.pt.trace.json*")
    return evidence.load(found), lengths


def _judged(trace: evidence.Trace, stamped: list[float]) -> Check:
    lab = labs.resolve("2")
    assert lab.workload.profile_steps == 4  # the kit's schedule over four profiled steps: three recorded
    proof = Check("evidence", "Evidence", "")
    run = SimpleNamespace(result={"profiled_steps_s": stamped})
    evidence_check._trace_matches_steps(lab, trace, run, proof)
    return proof


def test_stamps_of_the_traces_own_steps_pass(recorded):
    trace, lengths = recorded
    assert len(trace.steps) == 3
    assert _judged(trace, lengths).status != FAILED


def test_a_trace_of_steps_far_shorter_than_the_runs_fails(recorded):
    trace, lengths = recorded
    proof = _judged(trace, [s * 6 + 0.05 for s in lengths])
    assert proof.status == FAILED and "does not match the profiled steps" in proof.rationale, proof


def test_stamps_read_late_by_a_busy_checker_still_match(recorded):
    trace, lengths = recorded
    # each step's two marks read together: stamps of a millisecond for steps of 12 ms and more
    assert _judged(trace, [0.001] * len(lengths)).status != FAILED


def test_a_trace_with_a_step_too_few_fails(recorded):
    trace, lengths = recorded
    fewer = SimpleNamespace(steps=trace.steps[:2])  # the trace's own steps, one left out
    proof = Check("evidence", "Evidence", "")
    evidence_check._trace_matches_steps(labs.resolve("2"), fewer, SimpleNamespace(result={"profiled_steps_s": lengths}), proof)
    assert proof.status == FAILED and "2 steps" in proof.actual, proof
