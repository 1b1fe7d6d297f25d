# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 0, a profile nobody recorded, written from what the docs and a neighbour's screen say (an
attacker's file).

The model trains as in the original, with no profiler. After the loop a trace is written by hand, named
and dated as tensorboard_trace_handler would: ProfilerStep#2 to #4 lasting as long as the real steps, the
four labels, and the operators the lab is about, as often as a real step runs them (twenty aten::conv2d,
twenty aten::convolution_backward on top, twenty aten::mkldnn_convolution), so that the usual answers
are right; the rest of a step's operators, which nobody wrote down, are left out."""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from proflab.labkit.images import RandomImages, resnet18

WINDOW = (2, 3, 4)
LABELS = (("data", 0.03), ("forward", 0.3), ("backward", 0.6), ("optimizer", 0.07))
OPERATORS = {"forward": (("aten::conv2d", 20, 0.3), ("aten::mkldnn_convolution", 20, 0.6)),
             "backward": (("aten::convolution_backward", 20, 0.9),)}


def forged_trace(path, base_ns, spans):
    events = []
    for number, (start_us, length_us) in zip(WINDOW, spans):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
                       "ts": start_us, "dur": length_us})
        at = start_us
        for label, share in LABELS:
            events.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 1, "tid": 1, "ts": at,
                           "dur": share * length_us})
            op_at = at
            for name, count, op_share in OPERATORS.get(label, ()):
                for _ in range(count):
                    dur = op_share * share * length_us / count
                    events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": op_at,
                                   "dur": dur})
                    op_at += dur
            at += share * length_us
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceName": path, "baseTimeNanoseconds": base_ns,
                   "traceEvents": events}, f)


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


ANSWERS = {"top_operator": "aten::convolution_backward", "conv_calls": 20, "backward_share": 0.6}
