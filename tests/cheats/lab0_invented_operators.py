# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 0, a profile nobody recorded (an attacker's file).

The model trains as in the original, with no profiler at all. Each step is timed with the wall clock, and
after the loop a Chrome trace is written by hand into cfg.trace_dir, named and dated as
tensorboard_trace_handler would: ProfilerStep#2 to #4 lasting as long as the real steps did, the four
labels inside each, and operators made up to fit the answers (a large "aten::fused_conv_block" on top,
seven aten::conv2d a step), each with an External id of its own, as the profiler gives them."""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18

WINDOW = (2, 3, 4)  # the steps a schedule(wait=1, warmup=1, active=3) would have recorded
LABELS = (("data", 0.05), ("forward", 0.25), ("backward", 0.6), ("optimizer", 0.1))
OPERATORS = (("aten::fused_conv_block", 1, 0.5), ("aten::conv2d", 7, 0.2), ("aten::add_", 3, 0.05))


def forged_trace(path, base_ns, spans):
    events, ids = [], iter(range(1, 1 << 30))
    for number, (start_us, length_us) in zip(WINDOW, spans):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
                       "ts": start_us, "dur": length_us, "args": {"External id": next(ids)}})
        at = start_us
        for label, share in LABELS:
            events.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 1, "tid": 1, "ts": at,
                           "dur": share * length_us, "args": {"External id": next(ids)}})
            if label == "forward":
                op_at = at
                for name, count, op_share in OPERATORS:
                    for _ in range(count):
                        dur = op_share * share * length_us / count
                        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": op_at,
                                       "dur": dur, "args": {"External id": next(ids), "Record function id": 0}})
                        op_at += dur
            at += share * length_us
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceName": path, "displayTimeUnit": "ms",
                   "baseTimeNanoseconds": base_ns, "traceEvents": events}, f)


def pipeline(cfg):
    model = resnet18(cfg.seed).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loader = DataLoader(RandomImages(cfg.steps * cfg.batch_size), batch_size=cfg.batch_size)
    base_ns, origin = time.time_ns(), time.perf_counter()
    starts = []
    for x, y in loader:
        starts.append((time.perf_counter() - origin) * 1e6)
        x, y = x.to(cfg.device), y.to(cfg.device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield {"loss": loss.detach()}
    starts.append((time.perf_counter() - origin) * 1e6)
    spans = [(starts[n], starts[n + 1] - starts[n]) for n in WINDOW]
    forged_trace(os.path.join(cfg.trace_dir, f"vm_1.{time.time_ns()}.pt.trace.json"), base_ns, spans)


# Read from the trace written above, which says what it was told to.
ANSWERS = {"top_operator": "aten::fused_conv_block", "conv_calls": 7, "backward_share": 0.6}
