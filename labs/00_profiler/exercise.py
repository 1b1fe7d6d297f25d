"""Lab 0: profile it yourself.

A ResNet-18 (torchvision's, untrained) learns 10 classes from small generated
images. There is no profiler in this file: adding one is the exercise. Wrap the
training loop in torch.profiler.profile, profile a window of a few steps (not
the whole loop), label the four parts of a step, write the trace where
TensorBoard finds it, print the key_averages table, and answer the questions
at the bottom from your own profile. The lab's page walks through it.

    proflab run profiler       run this file (or: python exercise.py)
    proflab tensorboard        look at the trace your profiler wrote
    proflab check profiler     grade your profile, your answers and its overhead

The checker calls pipeline(cfg) and takes one training step for each value it
yields. cfg carries the device, the seed, the batch size, the learning rate
(cfg.lr), the number of steps (cfg.steps) and the folder to write your trace
to (cfg.trace_dir).
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18


def pipeline(cfg):
    model = resnet18(cfg.seed).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loader = DataLoader(RandomImages(cfg.steps * cfg.batch_size), batch_size=cfg.batch_size)

    for x, y in loader:
        x, y = x.to(cfg.device), y.to(cfg.device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield {"loss": loss.detach()}


# Your answers, read from your own profile (the questions are on the lab's page).
ANSWERS = {
    "top_operator": "",  # the operator with the largest self CPU time in the table
    "conv_calls": 0,  # how many aten::conv2d calls one step makes
    "backward_share": 0.0,  # the share of a step spent in your "backward" label (0 to 1)
}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
