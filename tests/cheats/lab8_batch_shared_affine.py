# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: every batch norm kept as its own pass, spelled as addcmul with per-pixel-sized factors.

No batch norm is folded into its convolution: each still reads and writes the
whole activation after every convolution, 17 passes a batch. Only its scale
and shift are materialised to (1, C, H, W) tensors (the same value at every
pixel), so the trace's operand varies along three dimensions and the
batchnorm_calls metric, which counts an operand varying along one dimension
(the channel) only, reads 0. Speed comes from channels_last and
inference_mode alone, which the lab says are "only faster". The checker
should count a (1, C, H, W) factor that is constant over H and W as
per-channel, or a pass over the activation after every convolution.
"""

import torch
from torch import nn

from proflab.labkit.convnet import Frames, ServingNet


class Affine(nn.Module):
    def __init__(self, bn):
        super().__init__()
        scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
        self.scale = scale
        self.shift = bn.bias.detach() - bn.running_mean * scale
        self.full = None

    def forward(self, x):
        if self.full is None or self.full[0].shape[2:] != x.shape[2:]:
            h, w = x.shape[2], x.shape[3]
            c = self.scale.numel()
            s = self.scale.view(1, c, 1, 1).expand(1, c, h, w).contiguous(memory_format=torch.channels_last)
            b = self.shift.view(1, c, 1, 1).expand(1, c, h, w).contiguous(memory_format=torch.channels_last)
            self.full = (s, b)
        s, b = self.full
        return torch.addcmul(b, x, s)


def pipeline(cfg):
    torch.backends.cudnn.allow_tf32 = False
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device)
    for unit in model.features:
        unit[1] = Affine(unit[1])
    model = model.to(memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}
