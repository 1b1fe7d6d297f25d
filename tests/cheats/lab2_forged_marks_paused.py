"""Lab 2 attempt: the marks forged from inside the runner, with no second handle and every pause kept.

The trick, spelled so that nothing is seen in /proc: the runner's own writer
and its self-stop are replaced (its module is in ``sys.modules``), so its
marks are dropped until the profiled steps; the file writes the warm-up and
timed marks itself, through the runner's own descriptor, during the first
step, and stops itself after each mark the runner would stop at, as the
runner does. The timed window then holds a millisecond of spinning per step;
the original's row-by-row lookups run after it, and the fused lookup only in
the steps the checker profiles.

What the checker should catch: nothing about the marks themselves. The CPU
the run spends after its window, counted by the kernel for the run's cgroup,
is far beyond the original's there, and counts against it: no faster.
"""

import json
import os
import signal
import sys
import time

import torch
from torch import nn

from proflab.labkit.recsys import Recommender, RequestLog

RUNNER = sys.modules.get("proflab.running.marking")  # where the runner's mark writer is bound
FORGING = {"on": RUNNER is not None}
if RUNNER is not None:
    real_write, real_kill = RUNNER._write, RUNNER._kill
    RUNNER._write = lambda fd, data: len(data) if FORGING["on"] else real_write(fd, data)
    RUNNER._kill = lambda pid, sig: None if FORGING["on"] else real_kill(pid, sig)


def _spec():
    try:
        with open(sys.argv[1]) as f:
            return json.load(f)
    except (IndexError, OSError, ValueError):
        return None


SPEC = _spec() if RUNNER is not None else None


def mark(code, pause):
    os.write(SPEC["mark_fd"], code)
    if pause and code.decode() in SPEC.get("pause_marks", ""):
        os.kill(os.getpid(), signal.SIGSTOP)  # as the runner does: the checker reads the CPU, then continues


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender().to(cfg.device)
    users_bag = nn.EmbeddingBag.from_pretrained(model.users.weight, mode="mean")
    items_bag = nn.EmbeddingBag.from_pretrained(model.items.weight, mode="mean")
    users, items = model.users.weight, model.items.weight
    warm, timed = (SPEC["warmup_steps"], SPEC["timed_steps"]) if SPEC else (0, 0)

    with torch.inference_mode():
        for step, batch in enumerate(log.batches(cfg.batch_size)):
            if step == 0 and SPEC is not None:
                for i in range(warm):
                    mark(b"W", pause=i == 0)
                mark(b"S", pause=True)
                for _ in range(timed):
                    until = time.perf_counter() + 0.001
                    while time.perf_counter() < until:
                        pass
                    mark(b"T", pause=False)
                mark(b"E", pause=True)
            if SPEC is not None and step == warm + timed:
                mark(b"P", pause=True)  # the runner's first "P" was dropped: written here, then its own marks
                FORGING["on"] = False
            if SPEC is not None and step >= warm + timed:
                batch = batch.to(cfg.device)
                user = users_bag(batch.user_ids, batch.user_offsets)
                item = items_bag(batch.item_ids, batch.item_offsets)
                scores = model.mlp(torch.cat([user, item], dim=1)).squeeze(1)
            else:
                features = []
                for user_bag, item_bag in batch.requests():
                    user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                    item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                    features.append(torch.cat([user, item]).to(cfg.device))
                scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
