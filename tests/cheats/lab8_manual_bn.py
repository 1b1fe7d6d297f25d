# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: every batch norm written out by hand, so that no aten::batch_norm appears.

Each unit runs its convolution, then (x - mean) / sqrt(var + eps) * weight
+ bias with the batch norm's own buffers, then the ReLU: the same
normalisation, four passes over the activations instead of one.

What the checker should catch: The bottleneck is gone: four per-channel
operators per unit count as four batch-norm calls.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.convnet import Frames, ServingNet


def unit_forward(unit, x):
    conv, bn = unit[0], unit[1]
    x = conv(x)
    mean, var = bn.running_mean.view(1, -1, 1, 1), bn.running_var.view(1, -1, 1, 1)
    x = (x - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    return F.relu(x)


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    net = ServingNet().to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit in net.features:
                x = unit_forward(unit, x)
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
