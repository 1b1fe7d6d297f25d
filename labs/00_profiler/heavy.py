"""Lab 0, the heavy way: every step profiled, with shapes, memory and stacks.

What the overhead of a window (solution.py) is measured against: the whole
loop under the profiler, recording everything it can, exported as one trace.
"""

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18


def pipeline(cfg):
    model = resnet18(cfg.seed).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loader = DataLoader(RandomImages(cfg.steps * cfg.batch_size), batch_size=cfg.batch_size)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cfg.device.type == "cuda" else [])

    with profile(activities=activities, record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            yield {"loss": loss.detach()}
    prof.export_chrome_trace(f"{cfg.trace_dir}/heavy.pt.trace.json")
