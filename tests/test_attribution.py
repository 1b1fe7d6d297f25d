"""Where the time went, named where it went: real traces of small training loops, profiled here.

A data set that convolves each sample (a blur in ``__getitem__``) runs its convolutions inside the
DataLoader's ``__next__``: they are the loader's, not the model's, in the operator table, the largest
operators ``proflab profile`` prints, a diff, and a gate's reason for a slower version (workers 2 → 0:
the DataLoader wait grew, whatever operator it holds). AdamW reads each parameter's step count with
``.item()`` inside ``optimizer.step()``: the optimizer's own reads, shown apart from the step's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset

from proflab.grading import gate
from proflab.measuring import diagnosis, evidence, operators
from proflab.measuring.metrics import host_syncs
from proflab.viewing import dashboard

BATCH = 8
BLUR = torch.ones(3, 1, 9, 9) / 81.0
MODEL_S = 0.025  # the rest of a training step, as a wait: long enough for two workers to load ahead


class Photos(Dataset):
    """Random 3×160×160 images, blurred one by one as they are loaded (``blur``) or not."""

    def __init__(self, blur: bool):
        self.blur = blur
        self.images = torch.rand(BATCH * 8, 3, 160, 160, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        x = self.images[i]
        if self.blur:
            x = F.conv2d(x[None], BLUR, padding=4, groups=3)[0]
        return x, i % 10


def _profile(tmp_path: Path, name: str, *, blur: bool = True, workers: int = 0, adamw: bool = False) -> evidence.Trace:
    torch.manual_seed(0)
    # a small model (the images pooled 4× first): the loader's convolutions are most of the step's work
    model = nn.Sequential(nn.AvgPool2d(4), nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 10))
    optimizer = (torch.optim.AdamW(model.parameters(), foreach=False) if adamw
                 else torch.optim.SGD(model.parameters(), lr=0.1))
    loader = DataLoader(Photos(blur), batch_size=BATCH, num_workers=workers)
    out = tmp_path / name
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as the kit's runs: no pool of threads waiting on a busy machine
    try:
        _loop(model, optimizer, loader, out)
    finally:
        torch.set_num_threads(threads)
    (found,) = out.glob("*.pt.trace.json*")
    return evidence.load(found)


def _loop(model: nn.Module, optimizer, loader: DataLoader, out: Path) -> None:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=2, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for step, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(MODEL_S)
            prof.step()
            if step == 6:
                break


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, evidence.Trace]:
    tmp = tmp_path_factory.mktemp("attribution")
    return {"loader": _profile(tmp, "loader", workers=0), "workers": _profile(tmp, "workers", workers=2),
            "adamw": _profile(tmp, "adamw", blur=False, adamw=True)}


def _row(rows: list[operators.Row], name: str) -> operators.Row | None:
    return next((r for r in rows if r.name == name), None)


def test_a_data_sets_convolutions_are_the_loaders_in_the_table(traces):
    rows = operators.table(traces["loader"], per_step=True)
    loader_conv = _row(rows, "aten::conv2d" + operators.IN_LOADING)
    model_conv = _row(rows, "aten::conv2d")
    assert loader_conv is not None and loader_conv.calls == BATCH, [r.name for r in rows]
    assert model_conv is not None and model_conv.calls == 1, [r.name for r in rows]
    # key_averages mixes them under one name: the table it gives (lab 0's answers) still can
    plain = _row(operators.table(traces["loader"], per_step=True, loading_apart=False), "aten::conv2d")
    assert plain.calls == BATCH + 1


def test_the_largest_operators_line_names_the_loaders_convolutions_apart(traces):
    named = {name: calls for name, _, _, calls in diagnosis.diagnose(traces["loader"]).operators}
    assert all(calls != BATCH + 1 for calls in named.values()), named
    convolving = [name for name in named if name.endswith(operators.IN_LOADING) and "convolution" in name]
    assert convolving and all(named[name] == BATCH for name in convolving), named


def test_a_diff_of_workers_two_to_none_moves_the_loaders_work_not_the_models(traces):
    changes = {c.name: c for c in operators.diff(traces["workers"], traces["loader"])}
    added = changes["aten::conv2d" + operators.IN_LOADING]
    assert added.status == "added" and added.after.calls == BATCH
    # The model's own convolution: called once a step in both
    model = changes["aten::conv2d"]
    assert model.before.calls == model.after.calls == 1, model


def test_a_gates_reason_for_workers_two_to_none_is_the_dataloader_wait(traces):
    report = gate.GateReport(candidate="train.py", baseline="HEAD:train.py")
    moved = gate._what_changed(report, {"baseline": traces["workers"], "candidate": traces["loader"]})
    gate._changes(report, moved, noise=0.0)
    slower = report.because["slower"]
    assert slower.startswith("the step's DataLoader wait went from "), slower
    wait = [report.breakdown[v]["host_ms"]["DataLoader wait"] for v in ("baseline", "candidate")]
    assert wait[1] > wait[0], wait
    assert "; of the operators, `" in slower, slower
    # and the other way round, why the fix is faster
    report = gate.GateReport(candidate="train.py", baseline="HEAD:train.py")
    moved = gate._what_changed(report, {"baseline": traces["loader"], "candidate": traces["workers"]})
    gate._changes(report, moved, noise=0.0)
    assert report.because["faster"].startswith("the step's DataLoader wait went from "), report.because


def test_adamws_own_reads_are_shown_apart_from_the_steps(traces):
    trace = traces["adamw"]
    reads = evidence.host_reads(trace)
    params = 4  # the conv's and the linear layer's weights and biases: a step count read each
    assert reads.in_step_per_step == 0, reads
    assert reads.in_optimizer_per_step == params, reads
    assert diagnosis.own_reads(trace) == []
    assert not any(f.key == "reads" for f in diagnosis.diagnose(trace).findings)
    shown = dashboard.overview(trace)
    assert shown["host_reads_per_step"] == 0 and shown["optimizer_reads_per_step"] == params, shown
    assert not any("host reads per step" in f["what"] for f in shown["findings"]), shown["findings"]
    json.dumps(shown)  # the Profile tab serves it as JSON
    # graded, they still count (a read moved into an optimizer of one's own is still a read)
    graded = host_syncs.measure(trace)
    assert graded.value == params and graded.details["in_optimizer"] == params, graded
    assert "inside optimizer.step()" in graded.summary


def test_a_collectives_backend_ranges_are_not_among_the_steps_operators(tmp_path):
    """gloo's all_reduce ranges run on gloo's own threads, overlapping the step and each other: the
    communication is a finding of its own (the time they cover), not an operator of the step (DDP's 24
    of them once made 106 ms of a 73.5 ms step)."""
    import torch.distributed as dist

    import sys

    sys.path.insert(0, str(Path(__file__).parent / "metrics"))
    from real_traces import profiled

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        grads = torch.ones(1_000_000)
        trace = profiled(tmp_path, lambda: [dist.all_reduce(grads) for _ in range(4)])
    finally:
        dist.destroy_process_group()
    assert any(r.name.startswith("gloo:") for r in operators.table(trace)), "no gloo range recorded"
    named = [name for name, *_ in diagnosis.diagnose(trace).operators]
    assert "c10d::allreduce_" in named and not any(n.startswith(("gloo:", "nccl")) for n in named), named
