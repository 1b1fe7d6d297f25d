"""Lab 0, a learner's own sound fix (written from the lab page alone): the same window and labels as
the reference, but its own table, the rows it needs printed one by one, and its own answers."""

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18


def pipeline(cfg):
    model = resnet18(cfg.seed).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loader = DataLoader(RandomImages(cfg.steps * cfg.batch_size), batch_size=cfg.batch_size)

    activities = [ProfilerActivity.CPU]
    if cfg.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    with profile(activities=activities, schedule=schedule(wait=2, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)) as prof:
        batches = iter(loader)
        for _ in range(len(loader)):
            with record_function("data"):
                x, y = next(batches)
                x, y = x.to(cfg.device), y.to(cfg.device)
            with record_function("forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("backward"):
                opt.zero_grad()
                loss.backward()
            with record_function("optimizer"):
                opt.step()
            prof.step()
            yield {"loss": loss.detach()}

    averages = prof.key_averages()
    for row in averages:
        if row.key in ("aten::conv2d", "data", "forward", "backward", "optimizer"):
            print(f"{row.key:>15}  calls {row.count:4d}  CPU total {row.cpu_time_total / 1000:9.3f} ms")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=10))


ANSWERS = {
    "top_operator": "aten::convolution_backward",
    "conv_calls": 20,
    "backward_share": 0.63,
}
