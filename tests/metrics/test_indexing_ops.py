"""indexing_ops: row lookups per step, in real traces (every spelling: tests/test_lab2_check.py)."""

from __future__ import annotations

import torch

from proflab.measuring.metrics import indexing_ops
from real_traces import profiled

TABLE = torch.randn(32, 8)
IDS = torch.tensor([1, 2, 3, 4, 5, 6, 7])


def test_seven_rows_taken_one_at_a_time_are_seven_lookups(tmp_path):
    m = indexing_ops.measure(profiled(tmp_path, lambda: [TABLE[i] for i in range(7)]))
    assert m.unit == indexing_ops.UNIT == "ops"
    assert m.value == 7
    assert m.details["aten::select"] == 7


def test_the_same_rows_looked_up_at_once_are_one(tmp_path):
    m = indexing_ops.measure(profiled(tmp_path, lambda: torch.nn.functional.embedding(IDS, TABLE)))
    assert m.value == 1  # aten::embedding, not again for the index_select it runs inside itself
    assert m.details["aten::embedding"] == 1
