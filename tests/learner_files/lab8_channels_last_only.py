"""Lab 8, a partial fix: channels_last and inference_mode, the batch norms left as they are.

Faster than the original, since the convolutions no longer reorder their
activations, but every batch norm still makes its own pass over them.
"""

import torch

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device, memory_format=torch.channels_last)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images.contiguous(memory_format=torch.channels_last))
            yield {"logits": logits.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
