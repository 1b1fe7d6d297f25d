"""op_count: the outermost aten:: operators per step, views left out, in real traces."""

from __future__ import annotations

import torch

from proflab.measuring.metrics import op_count
from real_traces import profiled

X = torch.randn(64, 64)


def test_outermost_operators_count_once_and_views_not_at_all(tmp_path):
    m = op_count.measure(profiled(tmp_path, lambda: (torch.relu(X), X + 1, X.view(-1), X.t())))
    assert m.unit == op_count.UNIT == "ops"
    assert m.value == 2
    assert m.details["aten::relu"] == 1 and m.details["aten::add"] == 1


def test_a_hand_written_softmax_is_more_operators_than_the_built_in(tmp_path):
    def by_hand():
        e = (X - X.max(dim=1, keepdim=True).values).exp()
        return e / e.sum(dim=1, keepdim=True)

    hand = op_count.measure(profiled(tmp_path, by_hand))
    built_in = op_count.measure(profiled(tmp_path, lambda: torch.softmax(X, dim=1)))
    assert built_in.value == 1
    assert hand.value >= 5
