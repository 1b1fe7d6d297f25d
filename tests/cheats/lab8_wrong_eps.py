# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: the batch norms folded with eps = 1e-3 (Keras's default), not the model's 1e-5.

The fold is otherwise the reference's; every logit moves by up to 1.6e-4,
0.6% of its size.

What the checker should catch: Same work, same results, at the first step.
"""

import torch
from torch import nn

from proflab.labkit.convnet import Frames, ServingNet

EPS = 1e-3


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet()
    with torch.no_grad():
        for unit in model.features:
            conv, bn = unit[0], unit[1]
            scale = bn.weight / torch.sqrt(bn.running_var + EPS)
            conv.weight.mul_(scale.view(-1, 1, 1, 1))
            conv.bias = nn.Parameter(bn.bias - bn.running_mean * scale)
            unit[1] = nn.Identity()
    model = model.to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}
