"""host_gap: the milliseconds of a step no operator covers, in real traces."""

from __future__ import annotations

import io
import time

import torch

from proflab.measuring.metrics import host_gap
from real_traces import profiled


def test_host_work_between_operators_is_the_gap(tmp_path):
    x = torch.randn(64, 64)

    def step():
        y = x @ x
        time.sleep(0.02)  # the host's own work: no operator runs
        return y.sum()

    m = host_gap.measure(profiled(tmp_path, step))
    assert m.unit == host_gap.UNIT == "ms"
    assert m.value >= 18.0 and m.details["share"] > 0.25 and m.details["steps"] == 3


def test_a_step_of_operators_leaves_little_gap(tmp_path):
    x = torch.randn(256, 256)
    m = host_gap.measure(profiled(tmp_path, lambda: (x @ x @ x).relu().sum()))
    assert m.value < 5.0


def test_a_checkpoint_written_every_step_is_host_work(tmp_path):
    model = torch.nn.Linear(512, 512)
    buffer = io.BytesIO()

    def step():
        buffer.seek(0)
        torch.save(model.state_dict(), buffer)
        return model(torch.randn(8, 512)).sum()

    (tmp_path / "quiet").mkdir()
    (tmp_path / "saving").mkdir()
    quiet = host_gap.measure(profiled(tmp_path / "quiet", lambda: model(torch.randn(8, 512)).sum()))
    saving = host_gap.measure(profiled(tmp_path / "saving", step))
    assert saving.value > quiet.value + 0.2, (saving, quiet)
