"""The metric ``batchnorm_calls`` on small real traces written by torch.profiler: batch norm counted however
it is spelled, and nothing counted in a folded network."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

from proflab.measuring.metrics import batchnorm_calls
from proflab.measuring.trace import TraceError, load

STEPS = 2  # recorded steps, after one step of the profiler's warm-up


def traced(tmp_path, step, record_shapes=True):
    """The trace of ``step()`` run in STEPS recorded profiler steps, loaded as the checker loads one."""
    torch.set_num_threads(1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes, acc_events=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1)) as prof:
        for _ in range(1 + STEPS):
            step()
            prof.step()
    path = tmp_path / "t.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return load(path)


def convnet(channels_last=False):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    net.eval()
    return net.to(memory_format=torch.channels_last) if channels_last else net


X = torch.randn(4, 3, 8, 8)


def test_each_batch_norm_module_counts_once(tmp_path):
    net = convnet()
    m = batchnorm_calls.measure(traced(tmp_path, lambda: net(X)))
    assert m.value == 2.0  # aten::batch_norm once per module, not again for what runs inside it
    assert m.details["aten::batch_norm"] == 2.0 and m.details["by_hand_per_step"] == 0.0
    assert m.unit == batchnorm_calls.UNIT == "per step" and m.details["steps"] == STEPS
    assert "2 aten::batch_norm" in m.summary


def test_a_folded_network_runs_none_in_any_layout(tmp_path):
    from torch.fx.experimental.optimization import fuse

    folded = fuse(convnet()).to(memory_format=torch.channels_last)  # convolutions with a bias, ReLU, pool, linear

    def step():
        with torch.inference_mode():
            folded(X.contiguous(memory_format=torch.channels_last))

    m = batchnorm_calls.measure(traced(tmp_path, step))
    assert m.value == 0.0, m.summary


def test_functional_and_instance_norm_count_once_each(tmp_path):
    mean, var, w, b = torch.zeros(3), torch.ones(3), torch.ones(3), torch.zeros(3)

    def step():
        F.batch_norm(X, mean, var, w, b, training=False)
        F.instance_norm(X, mean, var, w, b, use_input_stats=False)  # a batch norm with running statistics

    m = batchnorm_calls.measure(traced(tmp_path, step))
    assert m.value == 2.0, m.summary
    assert m.details["aten::batch_norm"] == 1.0 and m.details["aten::instance_norm"] == 1.0


def test_a_batch_norm_written_by_hand_counts_each_pass(tmp_path):
    net = convnet()
    bn = net[1]

    def step():
        x = net[0](X)
        shape = (1, -1, 1, 1)
        x = (x - bn.running_mean.view(shape)) / torch.sqrt(bn.running_var.view(shape) + bn.eps) \
            * bn.weight.view(shape) + bn.bias.view(shape)
        return x.relu()

    m = batchnorm_calls.measure(traced(tmp_path, step))
    assert m.value == 4.0, m.summary  # sub, div, mul, add: each a pass over the activation
    assert m.details["by_hand_per_step"] == 4.0
    for name in ("aten::sub", "aten::div", "aten::mul", "aten::add"):
        assert m.details[f"{name} applying a per-channel tensor to an activation"] == 1.0


def test_a_scale_and_shift_expanded_to_full_size_still_count(tmp_path):
    scale, shift = torch.rand(1, 3, 1, 1), torch.rand(3, 1, 1)

    def step():
        torch.addcmul(shift.expand_as(X), X, scale.expand_as(X))  # zero strides outside the channels
        X * scale  # a (1, C, 1, 1) factor

    m = batchnorm_calls.measure(traced(tmp_path, step))
    assert m.value == 2.0, m.summary  # the addcmul and the mul; not the expand_as views
    assert not any("expand" in key for key in m.details)


def test_a_scale_spelled_as_a_depthwise_convolution_counts(tmp_path):
    scale, shift = torch.rand(3, 1, 1, 1), torch.rand(3)
    m = batchnorm_calls.measure(traced(tmp_path, lambda: F.conv2d(X, scale, shift, groups=3)))
    assert m.value == 1.0, m.summary
    assert "1x1 depthwise convolution" in m.summary


def test_a_factor_materialised_per_pixel_and_shared_by_the_batch_is_counted(tmp_path):
    """The scale and shift of a batch norm expanded to (1, C, H, W) and made contiguous (in channels last):
    they vary along the pixels too, but every image of the batch shares them."""
    scale = torch.randn(1, 3, 1, 1).expand(1, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    shift = torch.randn(1, 3, 1, 1).expand(1, 3, 8, 8).contiguous()
    m = batchnorm_calls.measure(traced(tmp_path, lambda: torch.addcmul(shift, X, scale)))
    assert m.value == 1.0, m.summary
    m = batchnorm_calls.measure(traced(tmp_path, lambda: X.permute(0, 2, 3, 1) * scale.permute(0, 2, 3, 1)))
    assert m.value == 1.0, m.summary


def test_arithmetic_that_is_not_per_channel_is_not_counted(tmp_path):
    other = torch.randn(4, 3, 8, 8)
    row = torch.randn(8)

    def step():
        X + other  # a residual: two activations
        X * row  # one factor per column, not per channel
        X * 2.0
        torch.relu(X)

    m = batchnorm_calls.measure(traced(tmp_path, step))
    assert m.value == 0.0, m.summary


def test_a_trace_without_shapes_is_refused(tmp_path):
    net = convnet()
    with pytest.raises(TraceError, match="record_shapes"):
        batchnorm_calls.measure(traced(tmp_path, lambda: net(X), record_shapes=False))


def test_it_is_registered():
    from proflab.measuring.metrics import METRICS

    assert METRICS[batchnorm_calls.NAME] is batchnorm_calls.measure
    assert "Seen in TensorBoard:" in batchnorm_calls.__doc__
