"""Lab 8, a learner's fix: torch.nn.utils.fusion.fuse_conv_bn_eval on each unit, in the default layout.

Each unit's convolution and batch norm become one new convolution; the
frames stay NCHW, and the model is served under torch.inference_mode().
"""

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from proflab.labkit.convnet import Frames, ServingNet


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet()
    for unit in model.features:
        unit[0] = fuse_conv_bn_eval(unit[0], unit[1])
        unit[1] = nn.Identity()
    model = model.to(cfg.device)

    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            logits = model(images)
            yield {"logits": logits.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
