"""Lab 8: serving a convnet.

A camera service classifies frames in batches with a small pretrained
convnet, shaped like a MobileNet: a stem and eight depthwise-separable
blocks, 17 convolutions, each followed by a batch norm and a ReLU. The model
is in eval() mode, so every batch norm applies the statistics it learned in
training. The service passes each batch of frames through the model and
sends the logits back to the cameras, one batch after another. The model is
small, yet a batch takes longer to answer than the service can afford.
Where does its time go?

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
