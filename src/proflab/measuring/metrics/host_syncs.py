"""Round trips to the host per step: each time Python waits for a tensor's value.

On CUDA (the trace holds GPU events): the runtime and driver calls that
block the host until the device has caught up (``SYNC_CALLS``):
``cudaStreamSynchronize`` behind every ``.item()``, ``.cpu()`` and
``.tolist()``, ``cudaDeviceSynchronize`` behind ``torch.cuda.synchronize()``.
The device-to-host copies are reported beside them.

On CPU there is no device to wait for, but the same lines still read
tensors into Python, and the work done there on Python numbers is what
costs: each ``aten::_local_scalar_dense`` (under ``aten::item`` for
``.item()``, ``float(t)``, ``if t:``, a tensor formatted or printed) and
each outermost ``aten::resolve_neg`` (the first thing ``.tolist()`` and
``.numpy()`` do) counts once; so does each outermost operator whose
output's size depends on values (``SIZE_READS``: ``.nonzero()``,
``x[mask]``, ``torch.where(mask)``, ``unique``, ``bincount`` with or
without ``minlength``; ``torch.equal``), which on
CUDA waits for the device as ``.item()`` does: a read spelled as a shape
is still a read.

Every read counts, wherever in the step it is made (a read moved into a data
set's code, or into an optimizer's ``step``, is still made once per step);
``details["in_data_loading"]`` and ``details["in_optimizer"]`` say how many
were inside data loading and inside ``optimizer.step()`` (AdamW reads each
parameter's step count with ``.item()`` unless ``capturable=True``). The value is in reads per step, averaged
over the profiled steps. ``host_reads`` gives the same reads apart, for the
grading summary, the Overview and ``proflab run``.

Seen in TensorBoard: Profile › Overview, host reads per step; Trace timeline,
``aten::item`` and ``aten::_local_scalar_dense`` (on CUDA
``cudaStreamSynchronize`` and the gaps in the device lane) under every
``ProfilerStep#``; Profile › Operators, the Calls of ``aten::item``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..trace import LOADING_PREFIXES, OPTIMIZER_PREFIX, Event, Measure, Trace, aten_ops, outermost

NAME = "host_syncs"
UNIT = "per step"

# CUDA runtime and driver calls that block the host until the device catches up.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2",
})
# On the host, the operators that read a tensor's values into Python.
HOST_READS = {
    "aten::_local_scalar_dense": "item()",  # .item(), float(t), int(t), bool(t), `if t:`, f"{t:.3f}", repr(t)
    "aten::resolve_neg": "tolist()",  # .tolist() and .numpy() resolve the negation bit first
}
# Operators whose output's size depends on the values in their input: the host must read those values
# (on CUDA, wait for the device) before it knows the size, whether or not Python ever reads a number.
# x[mask], torch.where(mask), argwhere and .nonzero() all run aten::nonzero; torch.equal answers a Python
# bool; torch.bincount's output has max(minlength, largest value + 1) bins. (masked_select and repeat_interleave without output_size read their size through
# aten::_local_scalar_dense, counted above; nonzero_static and repeat_interleave with output_size do not
# depend on the values.)
SIZE_READS = {
    "aten::nonzero": "nonzero()",
    "aten::_unique": "unique()", "aten::_unique2": "unique()", "aten::unique_dim": "unique()",
    "aten::unique_consecutive": "unique()", "aten::unique_dim_consecutive": "unique()",
    "aten::equal": "torch.equal()",
    # Sized by the largest value (minlength only sets a floor): on CUDA it reads it back, every call.
    "aten::bincount": "bincount()",
}


@dataclass(frozen=True)
class HostReads:
    """Host reads per step by what made them (``.item()``, ``cudaStreamSynchronize``…), apart: those of the
    training step's own code; those inside data loading (a DataLoader's ``__next__``: the data set's own
    code, its collate), which the step's code did not make and which, on CPU, wait for no device; and those
    inside ``optimizer.step()`` (``Optimizer.step#…``: the optimizer's own, AdamW's step counts)."""

    in_step: dict[str, float]
    in_loading: dict[str, float]
    copies_per_step: float  # device-to-host copies (CUDA)
    in_optimizer: dict[str, float] = field(default_factory=dict)

    @property
    def in_step_per_step(self) -> float:
        return round(sum(self.in_step.values()), 2)

    @property
    def in_loading_per_step(self) -> float:
        return round(sum(self.in_loading.values()), 2)

    @property
    def in_optimizer_per_step(self) -> float:
        return round(sum(self.in_optimizer.values()), 2)


def counts_text(by_name: dict[str, float]) -> str:
    """Reads per step by what made them, most first: ``3 tolist(), 2 item()``."""
    return ", ".join(f"{count:g} {name}" for name, count in sorted(by_name.items(), key=lambda kv: -kv[1]))


def placement(trace: Trace) -> Callable[[Event], str]:
    """Where an event of ``trace`` was made: "loading" inside a DataLoader's ``__next__`` (or a DataPipe's
    iteration), "optimizer" inside
    ``optimizer.step()`` (``Optimizer.step#…``), on the same thread; else "step", the training step's own."""
    ranges: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {"loading": {}, "optimizer": {}}
    for e in trace.events:
        if e.name.startswith((*LOADING_PREFIXES, OPTIMIZER_PREFIX)):
            kind = "loading" if e.name.startswith(LOADING_PREFIXES) else "optimizer"
            ranges[kind].setdefault((str(e.pid), str(e.tid)), []).append((e.ts, e.end))

    def where(e: Event) -> str:
        return next((kind for kind, found in ranges.items()
                     if any(start <= e.ts < end for start, end in found.get((str(e.pid), str(e.tid)), ()))), "step")
    return where


def host_reads(trace: Trace) -> HostReads:
    """Each time Python waits for a tensor's value, per step, and where (see the module's docstring)."""
    n = len(trace.steps)
    reads: list[tuple[Event, str]]
    if trace.on_cuda:
        reads = [(e, e.name) for e in trace.within_steps(
            lambda e: e.cat in ("cuda_runtime", "cuda_driver") and e.name in SYNC_CALLS)]
        copies = len(trace.within_steps(lambda e: e.cat == "gpu_memcpy" and "DtoH" in e.name))
    else:
        aten = aten_ops(trace)
        found = [e for e in aten if e.name == "aten::_local_scalar_dense"]  # always inside aten::item & co.
        found += [e for e in outermost(aten) if e.name == "aten::resolve_neg"]
        found += outermost([e for e in aten if e.name in SIZE_READS])
        reads = [(e, HOST_READS.get(e.name) or SIZE_READS[e.name]) for e in found]
        copies = 0
    where = placement(trace)
    counts: dict[str, dict[str, int]] = {"step": {}, "loading": {}, "optimizer": {}}
    for e, what in reads:
        found = counts[where(e)]
        found[what] = found.get(what, 0) + 1
    per_step = {kind: {k: v / n for k, v in found.items()} for kind, found in counts.items()}
    return HostReads(per_step["step"], per_step["loading"], copies / n, per_step["optimizer"])


def measure(trace: Trace) -> Measure:
    reads = host_reads(trace)
    by_name = dict(reads.in_step)
    for name, count in [*reads.in_loading.items(), *reads.in_optimizer.items()]:
        by_name[name] = by_name.get(name, 0) + count
    per_step = sum(by_name.values())
    summary = f"{per_step:.2g} round trips per step ({counts_text(by_name) or 'none'})"
    if reads.in_loading:
        summary += f", {reads.in_loading_per_step:g} of them inside data loading"
    if reads.in_optimizer:
        summary += f", {reads.in_optimizer_per_step:g} of them inside optimizer.step()"
    if trace.on_cuda:
        summary += f"; {reads.copies_per_step:.2g} device-to-host copies per step"
    return Measure(value=round(per_step, 2), unit=UNIT, summary=summary,
                   details={"round_trips_per_step": per_step, "dtoh_copies_per_step": reads.copies_per_step,
                            "steps": float(len(trace.steps)), "in_data_loading": reads.in_loading_per_step,
                            "in_optimizer": reads.in_optimizer_per_step,
                            **by_name})
