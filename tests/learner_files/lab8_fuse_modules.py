"""Lab 8, a learner's fix: torch.ao.quantization.fuse_modules, conv + batch norm + ReLU per unit.

fuse_modules folds each batch norm into its convolution and keeps the ReLU
beside it (a ConvReLU2d); the model in channels_last, served under
torch.no_grad().
"""

import torch
from torch.ao.quantization import fuse_modules

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet()
    units = [[f"features.{i}.0", f"features.{i}.1", f"features.{i}.2"] for i in range(len(model.features))]
    model = fuse_modules(model, units).to(cfg.device, memory_format=torch.channels_last)

    with torch.no_grad():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
