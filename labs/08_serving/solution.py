"""Lab 8, reference solution: batch norm folded into the convolutions, channels_last, inference mode.

The trace of the original shows an aten::batch_norm after every convolution,
17 per batch, each a full pass over the activations (aten::native_batch_norm
under it), for a per-channel scale and shift: in eval() mode a batch norm
computes (x - running_mean) / sqrt(running_var + eps) * weight + bias with
numbers that never change. A convolution followed by a per-channel scale and
shift is one convolution with scaled weights and a bias, so the batch norms
can be folded into the convolutions once, before serving, and never run.

What the convolutions cost depends on the memory format: on the CPU, oneDNN
computes in a channels-last layout, and a tensor in PyTorch's default layout
(NCHW) is reordered on the way in and out of every convolution. The model's
weights and each batch go to torch.channels_last; inference_mode drops
autograd's bookkeeping, which a served model never uses.
"""

import torch
from torch import nn

from proflab.labkit.convnet import Frames, ServingNet


@torch.no_grad()
def fold_batch_norm(conv, bn):
    """``bn(conv(x))`` as one convolution: its weights scaled per output channel, the shift as its bias."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    conv.weight.mul_(scale.view(-1, 1, 1, 1))
    conv.bias = nn.Parameter(bn.bias - bn.running_mean * scale)


def pipeline(cfg):
    torch.backends.cudnn.allow_tf32 = False  # on CUDA, convolutions in float32 (not TF32), as on the CPU
    frames = Frames(cfg.data_dir)
    model = ServingNet()  # eval() mode, the same weights in every version
    for unit in model.features:  # each unit is conv, batch norm, ReLU
        fold_batch_norm(unit[0], unit[1])
        unit[1] = nn.Identity()
    model = model.to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}  # the answer goes back to the cameras


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
