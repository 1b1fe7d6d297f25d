"""memory_growth: the megabytes per step the profiled steps leave allocated, in real traces."""

from __future__ import annotations

import pytest
import torch

from proflab.measuring.metrics import memory_growth
from proflab.measuring.trace import TraceError
from real_traces import profiled

MB_OF_FLOATS = 2**20 // 4


def test_a_step_that_keeps_a_megabyte_grows_a_megabyte_per_step(tmp_path):
    kept: list[torch.Tensor] = []
    m = memory_growth.measure(profiled(tmp_path, lambda: kept.append(torch.ones(MB_OF_FLOATS)), steps=4,
                                       profile_memory=True))
    assert m.unit == memory_growth.UNIT == "MB per step"
    assert m.value == pytest.approx(1.0, abs=0.05)


def test_a_step_that_frees_what_it_allocates_grows_nothing(tmp_path):
    m = memory_growth.measure(profiled(tmp_path, lambda: torch.ones(MB_OF_FLOATS).sum(), steps=4,
                                       profile_memory=True))
    assert m.value == pytest.approx(0.0, abs=0.05)


def test_a_trace_without_memory_events_is_refused_not_read_as_zero(tmp_path):
    with pytest.raises(TraceError, match="memory events"):
        memory_growth.measure(profiled(tmp_path, lambda: torch.ones(MB_OF_FLOATS)))
