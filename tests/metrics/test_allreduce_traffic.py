"""allreduce_traffic: the megabytes of gradients sent per step by collectives, in real traces.

One process is a whole gloo group (world size 1): its all-reduce is a real
``c10d::allreduce_`` call, with the shapes it carries, and needs no second rank.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from proflab.measuring.metrics import allreduce_traffic
from proflab.measuring.trace import TraceError
from real_traces import profiled

MB_OF_FLOATS = 250_000  # 1,000,000 bytes at 4 per element


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_two_all_reduces_of_a_megabyte_send_two_megabytes_per_step(tmp_path, group):
    grads = torch.ones(MB_OF_FLOATS)
    m = allreduce_traffic.measure(profiled(tmp_path, lambda: [dist.all_reduce(grads) for _ in range(2)],
                                           record_shapes=True))
    assert m.unit == allreduce_traffic.UNIT == "MB"
    assert m.value == pytest.approx(2.0)
    assert m.details["c10d::allreduce_"] == 2
    assert allreduce_traffic.allreduce_calls(profiled(tmp_path, lambda: dist.all_reduce(grads),
                                                      record_shapes=True)).value == 1


def test_calls_without_recorded_shapes_are_refused_not_read_as_zero(tmp_path, group):
    grads = torch.ones(MB_OF_FLOATS)
    with pytest.raises(TraceError, match="record_shapes"):
        allreduce_traffic.measure(profiled(tmp_path, lambda: dist.all_reduce(grads)))
