"""Lab 8, a learner's fix: torch.fx folds the batch norms; channels_last and inference_mode."""

import torch
from torch.fx.experimental.optimization import fuse

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = fuse(ServingNet()).to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.to(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
