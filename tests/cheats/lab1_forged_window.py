"""Lab 1 attempt: a timed window of sleeps, marked by the file itself; the original's loading after it.

The trick, on the clock this time (lab 1 is timed in wall time, and its runs
are never paused): the runner's own mark writer is replaced (its module is in
``sys.modules``), so its marks are dropped until the profiled steps. During
the first step the file writes the warm-up marks, then a timed window of
sleeps as long as a fixed step, through the runner's own descriptor: nothing
to see in /proc. Every warm-up and timed step then loads its batch as the
original does, in the main process, after that window; only the profiled
steps load theirs from DataLoader workers, so the trace shows no wait.

What the checker should catch: the time the run goes on after its window,
beyond the original's there, counts as its steps' own: no faster.
"""

import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN

RUNNER = sys.modules.get("proflab.running.marking")  # where the runner's mark writer is bound
FORGING = {"on": RUNNER is not None}
if RUNNER is not None:
    real_write = RUNNER._write
    RUNNER._write = lambda fd, data: len(data) if FORGING["on"] else real_write(fd, data)


def _spec():
    try:
        with open(sys.argv[1]) as f:
            return json.load(f)
    except (IndexError, OSError, ValueError):
        return None


SPEC = _spec() if RUNNER is not None else None


def pipeline(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    # The original's order of samples, batch by batch: a loader over the indices with the same generator
    order = list(DataLoader(range(len(dataset)), batch_size=cfg.batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(cfg.seed)))
    order = [b.tolist() for b in order]
    warm, timed = (SPEC["warmup_steps"], SPEC["timed_steps"]) if SPEC else (len(order), 0)
    slow = DataLoader(dataset, batch_sampler=order[:warm + timed], num_workers=0)
    fast = DataLoader(dataset, batch_sampler=order[warm + timed:], num_workers=8, prefetch_factor=4)

    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def batches():
        yield from slow
        yield from fast

    for step, (images, labels) in enumerate(batches()):
        if step == 0 and SPEC is not None:
            for code in b"W" * warm + b"S":
                real_write(SPEC["mark_fd"], bytes([code]))
            for _ in range(timed):
                time.sleep(0.045)  # a fixed step's pace
                real_write(SPEC["mark_fd"], b"T")
            real_write(SPEC["mark_fd"], b"E")
        if SPEC is not None and step == warm + timed:
            real_write(SPEC["mark_fd"], b"P")  # the runner's first "P" was dropped; its own marks from here
            FORGING["on"] = False
        with record_function("train_step"):
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        yield {"loss": loss, "labels": labels}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
