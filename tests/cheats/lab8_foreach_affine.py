# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: every batch norm as a scale and a shift applied with torch's _foreach_ operators.

The scale and shift of each batch norm are computed once; each unit runs its
convolution, then torch._foreach_mul_ and torch._foreach_add_ on a list of one
activation and a list of one (C, 1, 1) tensor. The trace's outermost
operators take lists of tensors, whose shapes are lists of shapes, and the
per-tensor aten::mul_ and aten::add_ run inside them.

What the checker should catch: The bottleneck is gone: the tensors of a
_foreach_ call's lists are read one by one, and a per-channel one applied to
an activation counts as a batch-norm call.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    net = ServingNet().to(cfg.device, memory_format=torch.channels_last)
    affine = []
    with torch.no_grad():
        for unit in net.features:
            bn = unit[1]
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            affine.append(([scale.view(-1, 1, 1)], [(bn.bias - bn.running_mean * scale).view(-1, 1, 1)]))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit, (scale, shift) in zip(net.features, affine):
                x = unit[0](x)
                torch._foreach_mul_([x], scale)
                torch._foreach_add_([x], shift)
                x = F.relu(x)
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
