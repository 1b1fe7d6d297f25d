# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: each batch norm spelled as a 1x1 depthwise convolution after the real one.

A 1x1 convolution with one input channel per group and the batch norm's
scale as its weights, its shift as its bias, computes the same per-channel
scale and shift: no batch-norm operator and no elementwise arithmetic in the
trace, still a pass over every activation.

What the checker should catch: The bottleneck is gone: a convolution with
(C, 1, 1, 1) weights counts as a batch-norm call.
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
            affine.append((scale.view(-1, 1, 1, 1), bn.bias - bn.running_mean * scale))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit, (scale, shift) in zip(net.features, affine):
                x = F.relu(F.conv2d(unit[0](x), scale, shift, groups=scale.shape[0]))
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
