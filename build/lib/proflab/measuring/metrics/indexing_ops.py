"""Row lookups per step: the indexing operators the program calls on the host, plus host-to-device copies on CUDA.

Counted on the host: every ``cpu_op`` event named in ``INDEXING_OPS`` that
starts inside a ``ProfilerStep#``, however the lookup is spelled.
``tensor[i]`` with an integer runs one ``aten::select``; ``tensor[i:i + 1]``
one ``aten::slice``; ``tensor.narrow(0, i, 1)`` one ``aten::narrow``;
``tensor[ids]`` one ``aten::index``; an ``nn.Embedding`` call one
``aten::embedding``; an ``nn.EmbeddingBag`` call one
``aten::embedding_bag``. Only the calls the program makes count (the
outermost operators), not what an operator runs inside itself: the
``aten::index_select`` that ``aten::embedding`` runs is the same lookup, not a
second one, and the slices inside ``aten::mean`` are none. An operator that
cuts a tensor into views (``SPLITTING_OPS``: ``list(t)``, ``t.unbind()``,
``t.split(1)``) counts once for each view it makes (the ``aten::select`` or
``aten::narrow`` it runs inside itself for each): a table cut into rows is
looked up row by row, whichever of them the program then uses.

Counted on CUDA: every ``gpu_memcpy`` event with ``HtoD`` in its name that
starts inside a step. Copying ids to the device costs one copy per tensor;
copying each looked-up row or pooled vector costs one per row.

The value is the sum of both, in ops per step, averaged over the profiled steps.

Seen in TensorBoard: Profile › Operators, the Calls of ``aten::select``
(``aten::slice``, ``aten::narrow``, ``aten::index``…); Trace timeline, the
stair of lookups inside each ``ProfilerStep#``.
"""

from __future__ import annotations

import bisect

from ..trace import Measure, Trace, aten_ops, outermost

NAME = "indexing_ops"
UNIT = "ops"

INDEXING_OPS = frozenset({
    "aten::select", "aten::index", "aten::index_select", "aten::gather", "aten::take",
    "aten::embedding", "aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only",
    # a row taken as a slice is a lookup too
    "aten::slice", "aten::narrow",
})
# Operators that cut a tensor into many views at once (``list(t)``, ``t.unbind()``, ``t.split(1)``):
# each view they make is one row looked up, however many the program then uses.
SPLITTING_OPS = frozenset({
    "aten::unbind", "aten::split", "aten::split_with_sizes", "aten::unsafe_split", "aten::chunk",
    "aten::unsafe_chunk", "aten::tensor_split",
})
ROW_VIEWS = frozenset({"aten::select", "aten::narrow"})


def measure(trace: Trace) -> Measure:
    n = len(trace.steps)
    ops = aten_ops(trace)
    lookups = [e for e in outermost(ops) if e.name in INDEXING_OPS | SPLITTING_OPS]
    copies = trace.within_steps(lambda e: e.cat == "gpu_memcpy" and "HtoD" in e.name)

    views: dict[tuple[str, str], list[float]] = {}  # each thread's row views, by start
    for v in ops:
        if v.name in ROW_VIEWS:
            views.setdefault((str(v.pid), str(v.tid)), []).append(v.ts)
    for starts in views.values():
        starts.sort()
    counts: dict[str, int] = {}
    for e in lookups:
        made = 1
        if e.name in SPLITTING_OPS:  # one lookup for each row view it makes inside itself
            starts = views.get((str(e.pid), str(e.tid)), [])
            made = max(1, bisect.bisect_left(starts, e.end) - bisect.bisect_left(starts, e.ts))
        counts[e.name] = counts.get(e.name, 0) + made
    by_name = {name: count / n for name, count in counts.items()}
    per_step = sum(counts.values()) / n
    copies_per_step = len(copies) / n
    names = ", ".join(f"{count:.0f} {name}" for name, count in sorted(by_name.items(), key=lambda kv: -kv[1]))
    summary = f"{per_step:.0f} indexing ops per step ({names or 'none'})"
    if trace.on_cuda:
        summary += f" and {copies_per_step:.0f} host-to-device copies"
    return Measure(
        value=round(per_step + copies_per_step, 1),
        unit=UNIT,
        summary=summary,
        details={"indexing_ops_per_step": per_step, "htod_copies_per_step": copies_per_step,
                 "steps": float(n), **by_name},
    )
