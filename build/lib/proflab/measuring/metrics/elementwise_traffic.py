"""Millions of elements read per step by the operators that are not matrix products: what fusing removes.

An unfused chain (a softmax written as max, subtract, exp, sum, divide)
reads and writes a whole tensor at every operator, forward and backward,
for a little arithmetic each time; a fused built-in (``F.softmax``,
``F.layer_norm``, ``F.scaled_dot_product_attention``) reads its inputs once.
Counted from the shapes the profiler recorded (``record_shapes``): for every
outermost ``aten::`` operator inside a ``ProfilerStep#``, on any thread, the
number of elements of each tensor it takes, leaving out views
(``op_count.VIEW_OPS``), which read nothing, and matrix products
(``MATMUL_OPS``), which every version keeps. Code that ``torch.compile``
generates runs outside ``aten::`` operators and reads nothing here. So the
figure weighs each chain by the size of the tensors it walks over: the
attention scores' chain on (batch × heads × T × T) elements outweighs a
LayerNorm's on (batch × T × D). Also on CUDA, where the same operators launch
the kernels. The value is in millions of elements (``M elements``) per step.

Seen in TensorBoard: Trace timeline, the rows of short operators under each
``ProfilerStep#``; Profile › Operators (and Diff), the Calls and Self CPU of
``aten::mul``, ``aten::add``, ``aten::sub``, ``aten::div``.
"""

from __future__ import annotations

from ..trace import Measure, Trace, aten_ops, numel, outermost
from .op_count import VIEW_OPS

NAME = "elementwise_traffic"
UNIT = "M elements"

# Matrix products: the work every version of a block keeps, fused or not.
MATMUL_OPS = frozenset({"aten::mm", "aten::bmm", "aten::matmul", "aten::addmm", "aten::baddbmm", "aten::linear"})


def measure(trace: Trace) -> Measure:
    n = len(trace.steps)
    by_name: dict[str, float] = {}
    for e in outermost(aten_ops(trace)):
        if e.name in VIEW_OPS or e.name in MATMUL_OPS:
            continue
        read = sum(numel(d) for d in (e.args or {}).get("Input Dims") or [])
        by_name[e.name] = by_name.get(e.name, 0.0) + read
    per_step = sum(by_name.values()) / n if n else 0.0
    top = sorted(((name, v / n) for name, v in by_name.items()), key=lambda kv: -kv[1])
    names = ", ".join(f"{name} {v / 1e6:.1f}M" for name, v in top[:3])
    return Measure(value=round(per_step / 1e6, 2), unit=UNIT,
                   summary=f"{per_step / 1e6:.1f} M elements read per step outside matrix products"
                           + (f" (most: {names})" if names else ""),
                   details={"elements_per_step": per_step, "steps": float(n), **dict(top[:12])})
