"""Lab 4 gaming attempt: scrub the reads out of the trace after the profiler has written it.

The trick: the original loop, untouched, inside a try/finally. When the
checker closes the pipeline after the profiled steps, the finally block finds
the newest *.pt.trace.json (in the trace_dir of the runner's spec, named by
sys.argv[1], or else anywhere under a runs/ folder from the current folder
upward) and rewrites it without a single aten::item, aten::_local_scalar_dense
or aten::resolve_neg event, so the trace shows no reads into Python at all.

What the checker should catch: the runner sends the checker the sha256 of
the trace as soon as the profiler has written it, before any more of the lab
file runs; a trace that no longer matches it was changed, and fails. The
source audit refuses open, sys.argv and file writes in a lab file.
"""

import glob
import gzip
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches

READS = {"aten::item", "aten::_local_scalar_dense", "aten::resolve_neg"}


def newest_trace():
    """The newest trace the profiler wrote in this run; None outside the checker's runs."""
    try:
        with open(sys.argv[1]) as f:
            spec = json.load(f)
    except (IndexError, OSError, ValueError):
        return None
    if not isinstance(spec, dict) or "mark_fd" not in spec:
        return None  # not the runner's spec: leave every trace alone
    folders = [spec["trace_dir"]] if spec.get("trace_dir") else []
    here = os.path.abspath(os.getcwd())
    while True:  # else: a runs/ folder here or above
        folders.append(os.path.join(here, "runs"))
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in folders:
        found = glob.glob(os.path.join(folder, "**", "*.pt.trace.json*"), recursive=True)
        if found:
            return max(found, key=os.path.getmtime)
    return None


def scrub(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if e.get("name") not in READS]
    with opener(path, "wt") as f:
        json.dump(trace, f)


def pipeline(cfg):
    data = FeatureBatches(cfg.data_dir)
    model = Classifier().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    losses = []  # the loss of every step
    confidences = []  # the mean top-class probability of every step
    confusion = [[0] * CLASSES for _ in range(CLASSES)]  # confusion[true][predicted]
    correct = seen = 0

    try:
        for step, (x, y) in enumerate(data.batches(cfg.device)):
            start = time.perf_counter()
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if math.isnan(loss.item()):
                raise FloatingPointError(f"the loss is NaN at step {step}")
            opt.zero_grad()
            loss.backward()
            opt.step()

            # Book-keeping, in Python.
            losses.append(loss.item())
            preds = logits.argmax(dim=1).cpu().tolist()
            labels = y.cpu().tolist()
            correct += sum(p == t for p, t in zip(preds, labels))
            seen += len(labels)
            for t, p in zip(labels, preds):
                confusion[t][p] += 1
            probs = logits.softmax(dim=1).detach().cpu().tolist()
            confidences.append(sum(max(row) for row in probs) / len(probs))

            if cfg.device.type == "cuda":
                torch.cuda.synchronize()  # so that the time below is right
            ms = (time.perf_counter() - start) * 1000
            print(f"step {step:3d}  loss {losses[-1]:.4f}  accuracy {correct / seen:.3f}  "
                  f"confidence {confidences[-1]:.3f}  {ms:.1f} ms")

            out = {"loss": losses[-1]}
            if (step + 1) % cfg.log_every == 0:  # the metrics so far, every log_every steps
                out.update(accuracy=correct / seen, confusion=torch.tensor(confusion),
                           confidence=sum(confidences) / len(confidences),
                           weights=torch.stack([p.detach().norm() for p in model.parameters()]))
            yield out
    finally:
        path = newest_trace()
        if path:
            try:
                scrub(path)
            except (OSError, ValueError):
                pass


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
