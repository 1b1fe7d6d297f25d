"""What the attempts at gaming the checker share: the lab they target, and its reference fix.

Each attempt in this folder is graded with ``proflab check LAB --file
tests/cheats/NAME.py``, with the environment variable PROFLAB_CHEAT_LAB naming
the lab (``1``, ``fusion``...). They start from the lab's own reference fix,
so the only thing wrong with them is the trick itself.
"""

import copy
import importlib.util
import os
from types import SimpleNamespace

import torch

from proflab import labs, paths

LAB = labs.resolve(os.environ["PROFLAB_CHEAT_LAB"])
WORKLOAD = LAB.workload


def load_solution():
    spec = importlib.util.spec_from_file_location("cheat_reference", LAB.solution)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keep(out):
    """A step's yielded values, copied so that later steps cannot change them."""
    return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for k, v in out.items()}


def precompute(pipeline, cfg, steps):
    """The results of the first ``steps`` steps of ``pipeline``, computed now."""
    gen = pipeline(cfg)
    return [keep(next(gen)) for _ in range(steps)]


def cfg_guess(device="cpu"):
    """The cfg the checker will pass, rebuilt from the lab's manifest before it is given."""
    return SimpleNamespace(device=torch.device(device), batch_size=WORKLOAD.batch_size, seed=WORKLOAD.seed,
                           data_dir=paths.data_dir(), **WORKLOAD.params)
