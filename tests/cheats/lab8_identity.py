# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: the batch norms dropped (nn.Identity) instead of folded.

No batch norm runs, so the evidence would be met, but the network no longer
applies its learned statistics: every logit moves (by up to 0.3 here).

What the checker should catch: Same work, same results, at the first step.
"""

import torch
from torch import nn

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet()
    for unit in model.features:
        unit[1] = nn.Identity()
    model = model.to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}
