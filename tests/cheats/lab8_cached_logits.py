# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: classify every batch the checker will ask for in the first step, then replay the logits.

The original's model, unchanged, runs over all 87 batches (3 warm-up + 80
timed + 4 profiled, from lab.toml) inside the first step; every step then
yields its batch's kept logits and runs nothing.

What the checker should catch: the first step counts beyond the original's,
and the profiled steps run none of the network's convolutions (the work
floor of The bottleneck is gone).
"""

import torch

from proflab.labkit.convnet import Frames, ServingNet

STEPS = 3 + 80 + 4  # warmup_steps + timed_steps + profile_steps in lab.toml


def pipeline(cfg):
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device)
    with torch.inference_mode():
        kept = [model(images).cpu() for images, _ in zip(frames.batches(cfg.batch_size, cfg.device), range(STEPS))]
    for logits in kept:
        yield {"logits": logits}
