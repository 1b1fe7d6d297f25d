# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: every batch norm as one addcmul on the activation seen as rows of channels.

Each unit runs its convolution, then torch.addcmul(shift, rows, scale) on
rows = x.permute(0, 2, 3, 1).reshape(-1, C), a (N*H*W, C) view of the
channels_last activation: a two-dimensional tensor, no four-dimensional
activation in sight, the batch norm's scale and shift computed once in double
precision and applied in the activation's.

What the checker should catch: The bottleneck is gone: a (rows, C) view of
an activation is still the activation, and a (C,) tensor applied along it a
per-channel scale and shift.
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
            scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
            shift = bn.bias.double() - bn.running_mean.double() * scale
            affine.append((scale.float(), shift.float()))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit, (scale, shift) in zip(net.features, affine):
                x = unit[0](x)
                n, c, h, w = x.shape
                rows = torch.addcmul(shift, x.permute(0, 2, 3, 1).reshape(-1, c), scale)
                x = F.relu(rows.view(n, h, w, c).permute(0, 3, 1, 2))
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
