# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 8 attempt: the batch norms stay; the traced steps run a decoy while their logits come from the profiler's warm-up step.

No batch norm is folded. Every timed step runs the model as it came, batch
norms and all, only in channels_last under inference_mode (which the lab
calls "only faster"). The checker profiles the 4 steps after the timed
ones with schedule(wait=0, warmup=1, active=3): the first of them is the
profiler's warm-up, whose operators never reach the trace, and no check
bounds it. In that step the file pulls the next three batches and computes
their logits with the real model. In the three traced steps it runs a decoy
(the same 17 convolutions, the batch norms replaced by nn.Identity) on each
step's batch, for the work check, and yields the logits computed before.
The checker should catch that the traced steps are not the timed steps'
work, or bound the profiler's warm-up step.
"""

import torch
from torch import nn

from proflab.labkit.convnet import Frames, ServingNet

FIRST_PROFILED = 3 + 80  # labs/08_serving/lab.toml: warm-up and timed steps


def pipeline(cfg):
    torch.backends.cudnn.allow_tf32 = False
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device).to(memory_format=torch.channels_last)
    decoy = ServingNet().to(cfg.device).to(memory_format=torch.channels_last)
    for unit in decoy.features:
        unit[1] = nn.Identity()
    batches = frames.batches(cfg.batch_size, cfg.device)
    ahead = []

    with torch.inference_mode():
        step = 0
        while True:
            if step < FIRST_PROFILED:
                images = next(batches)
                logits = model(images.contiguous(memory_format=torch.channels_last))
            elif step == FIRST_PROFILED:  # the profiler warms up: nothing of this step is traced
                images = next(batches)
                logits = model(images.contiguous(memory_format=torch.channels_last))
                for _ in range(3):
                    nxt = next(batches).contiguous(memory_format=torch.channels_last)
                    ahead.append((nxt, model(nxt)))
            else:
                images, logits = ahead.pop(0)
                decoy(images)  # the convolutions the trace is to show
            yield {"logits": logits.cpu()}
            step += 1
