"""dataloader_wait: the milliseconds per step inside DataLoader.__next__, in real traces."""

from __future__ import annotations

import time

import pytest
import torch

from proflab.measuring.metrics import dataloader_wait
from real_traces import profiled


class Sleepy(torch.utils.data.Dataset):
    """Each sample takes 5 ms to make: a batch of two, at least 10 ms."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.zeros(4)


def test_a_step_waiting_on_a_slow_dataset_waits_its_sleep(tmp_path):
    batches = iter(torch.utils.data.DataLoader(Sleepy(), batch_size=2))
    m = dataloader_wait.measure(profiled(tmp_path, lambda: next(batches) * 2))
    assert m.unit == dataloader_wait.UNIT == "ms"
    assert m.value >= 10.0  # two samples of at least 5 ms each
    assert 0.5 < m.details["share"] <= 1.0  # the step does nothing else of note
    assert m.details["steps"] == 3


def test_batches_made_before_the_steps_are_no_wait(tmp_path):
    ready = list(torch.utils.data.DataLoader(Sleepy(), batch_size=2))[:4]
    batches = iter(ready)
    m = dataloader_wait.measure(profiled(tmp_path, lambda: next(batches) * 2))
    assert m.value == pytest.approx(0.0)
