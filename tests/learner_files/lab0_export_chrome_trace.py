"""Lab 0, a learner's profile: the reference window of labelled steps, written with export_chrome_trace.

The same schedule and labels as the reference, but the window is written by the profiler's own
export_chrome_trace into cfg.trace_dir as trace.json, not by tensorboard_trace_handler: a trace the
profiler wrote, under a name of the learner's choosing.
"""

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18


def pipeline(cfg):
    model = resnet18(cfg.seed).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loader = DataLoader(RandomImages(cfg.steps * cfg.batch_size), batch_size=cfg.batch_size)
    on_cuda = cfg.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])

    with profile(activities=activities,
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(cfg.trace_dir / "trace.json")) as prof:
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

    sort_by = "self_cuda_time_total" if on_cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_by, row_limit=10))


# Read from this machine's profile: the table above, and the trace in TensorBoard.
ANSWERS = {
    "top_operator": "aten::convolution_backward",
    "conv_calls": 20,
    "backward_share": 0.65,
}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
