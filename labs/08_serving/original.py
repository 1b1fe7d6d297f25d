"""Lab 8: serving a convnet, its batch norms run as operators of their own.

A camera service classifies frames in batches with a small pretrained
convnet, shaped like a MobileNet: a stem and eight depthwise-separable
blocks, 17 convolutions, each followed by a batch norm and a ReLU. The model
is in eval() mode, so every batch norm applies the statistics it learned in
training, the same numbers for every batch. The service runs it as it came
from training: each layer on its own, in PyTorch's default memory format,
with autograd on. The convolutions are the work; yet a batch takes longer
than they do. Why?

    proflab run serving          profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check serving        measure your fix against the original

The checker calls pipeline(cfg) and classifies one batch of frames for each
value it yields; the time between two yields is the latency of a batch.
cfg carries the device, the batch size, the seed and the data folder.
"""

import torch

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    torch.backends.cudnn.allow_tf32 = False  # on CUDA, convolutions in float32 (not TF32), as on the CPU
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device)  # eval() mode, the same weights in every version

    for images in frames.batches(cfg.batch_size, cfg.device):
        logits = model(images)
        yield {"logits": logits.cpu()}  # the answer goes back to the cameras


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
