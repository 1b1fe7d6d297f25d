# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: each batch norm as one addcmul, its scale and shift expanded to the activation's shape.

The scale and shift are computed once; each unit runs
torch.addcmul(shift, x, scale) with both expanded to x's full shape, so that
the recorded shapes look like three activations, not a per-channel tensor.

What the checker should catch: The bottleneck is gone: the expanded
operands have zero strides outside the channels, read from the recorded
strides, so each addcmul counts as a batch-norm call.
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
            affine.append((scale.view(1, -1, 1, 1), (bn.bias - bn.running_mean * scale).view(1, -1, 1, 1)))

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            x = images.contiguous(memory_format=torch.channels_last)
            for unit, (scale, shift) in zip(net.features, affine):
                x = unit[0](x)
                x = F.relu(torch.addcmul(shift.expand_as(x), x, scale.expand_as(x)))
            logits = net.classifier(net.flatten(net.pool(x)))
            yield {"logits": logits.cpu()}
