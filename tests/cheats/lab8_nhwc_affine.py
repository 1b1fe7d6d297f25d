# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: every batch norm applied by hand on a permuted (N, H, W, C) view, nothing folded.

The scale and shift of each batch norm are computed once; each unit runs its
convolution, then multiplies and adds them on x.permute(0, 2, 3, 1), a view of
the channels_last activation in which the channels are the last dimension, so
that the per-channel tensors are (C,) and broadcast along the last dimension,
not the second: the same normalisation, two passes over the activation.

What the checker should catch: The bottleneck is gone: a tensor that varies
along one dimension of an activation, whichever dimension and whichever view,
is a per-channel tensor, and each operator applying one counts as a batch-norm call.
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
            affine.append((scale, bn.bias - bn.running_mean * scale))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit, (scale, shift) in zip(net.features, affine):
                x = unit[0](x)
                nhwc = x.permute(0, 2, 3, 1)  # a view: channels last, as channels_last stores them
                x = F.relu(nhwc * scale + shift).permute(0, 3, 1, 2)
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
