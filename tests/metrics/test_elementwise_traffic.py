"""elementwise_traffic: millions of elements read per step outside matrix products, in real traces."""

from __future__ import annotations

import pytest
import torch

from proflab.measuring.metrics import elementwise_traffic
from real_traces import profiled

A, B = torch.randn(1000, 500), torch.randn(1000, 500)
W = torch.randn(500, 20)


def test_a_product_of_two_tensors_reads_both_and_a_matrix_product_reads_nothing(tmp_path):
    m = elementwise_traffic.measure(profiled(tmp_path, lambda: (A * B, A @ W), record_shapes=True))
    assert m.unit == elementwise_traffic.UNIT == "M elements"
    assert m.value == pytest.approx(1.0)  # aten::mul on 2 x 500,000 elements; aten::matmul left out
    assert m.details["aten::mul"] == 1_000_000
    assert "aten::matmul" not in m.details


def test_a_chain_reads_its_tensor_at_every_link(tmp_path):
    chain = elementwise_traffic.measure(profiled(tmp_path, lambda: ((A - 1) * 2).exp(), record_shapes=True))
    assert chain.value == pytest.approx(3 * 0.5)  # three operators, each reading A's 500,000 elements
