"""host_syncs: each time Python reads a tensor's value, per step, in real traces."""

from __future__ import annotations

import torch

from proflab.measuring.metrics import host_syncs
from real_traces import profiled

LOSSES = torch.randn(16)


def test_seven_item_calls_per_step_are_seven_reads(tmp_path):
    m = host_syncs.measure(profiled(tmp_path, lambda: [LOSSES[i].item() for i in range(7)]))
    assert m.unit == host_syncs.UNIT == "per step"
    assert m.value == 7
    assert m.details["item()"] == 7


def test_a_read_spelled_as_a_list_or_a_shape_is_still_a_read(tmp_path):
    m = host_syncs.measure(profiled(tmp_path, lambda: (LOSSES.tolist(), (LOSSES > 0).nonzero())))
    assert m.value == 2
    reads = host_syncs.host_reads(profiled(tmp_path, lambda: (LOSSES.tolist(), (LOSSES > 0).nonzero())))
    assert reads.in_step == {"tolist()": 1, "nonzero()": 1} and not reads.in_loading
    assert host_syncs.counts_text(reads.in_step) in ("1 tolist(), 1 nonzero()", "1 nonzero(), 1 tolist()")


def test_a_step_that_keeps_its_figures_on_the_tensor_reads_nothing(tmp_path):
    total = torch.zeros(())
    m = host_syncs.measure(profiled(tmp_path, lambda: total.add_(LOSSES.sum())))
    assert m.value == 0
