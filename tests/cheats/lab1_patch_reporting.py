"""Lab 1 gaming attempt: shrink the step times the run reports, on their way to the result file.

The trick: the original, untouched, plus a patch at import. The runner
writes its result with proflab.atomic.write_json, which serialises with
json.dumps; both are found through sys.modules and wrapped so that every
reported step time, the timed window and the mean step come out divided
by 5.

What the checker should catch: it takes the timings from its own stamps of
the marks the runner sends through a pipe, in its own process, and only
cross-checks the figures the run reports against them; a window reported as
a fifth of what the checker stamped fails that cross-check (something
changed the clock). The source audit refuses sys.modules and json in a lab
file.
"""

import json
import sys

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN

SHRINK = 5.0
_dumps = json.dumps


def _shrunk(result):
    if not isinstance(result, dict) or "window_s" not in result:
        return result
    result = dict(result)
    if "step_times" in result:
        result["step_times"] = [t / SHRINK for t in result["step_times"]]
    for key in ("window_s", "mean_step_s", "profiled_step_s"):
        if isinstance(result.get(key), (int, float)):
            result[key] = result[key] / SHRINK
    return result


def _dumps_shrunk(obj, *args, **kwargs):
    return _dumps(_shrunk(obj), *args, **kwargs)


json.dumps = _dumps_shrunk  # what proflab.atomic.write_json calls
_atomic = sys.modules.get("proflab.atomic")
if _atomic is not None:
    _write_json = _atomic.write_json

    def _write_json_shrunk(path, data):  # shrinks once, then writes as write_json does
        _atomic.write_text(path, _dumps(_shrunk(data), indent=2, sort_keys=False) + "\n")

    _atomic.write_json = _write_json_shrunk
    for _name in ("__main__", "proflab.running.runner"):  # a module-level copy of the name, if the runner keeps one
        _runner = sys.modules.get(_name)
        if _runner is not None and getattr(_runner, "write_json", None) is _write_json:
            _runner.write_json = _atomic.write_json


def pipeline(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    loader = DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(cfg.seed),
        num_workers=0,
    )

    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for images, labels in loader:
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
