"""Operators per step: the outermost ``aten::`` operators on the host, or the kernel launches on CUDA.

On CPU: every ``cpu_op`` event whose name starts with ``aten::`` and that
starts inside a ``ProfilerStep#``, counted only if it is the outermost
``aten::`` operator on its thread and not one of ``VIEW_OPS`` (a view or a
detach does no arithmetic; it is left out with whatever it runs inside).
``aten::linear`` counts once, not again for the ``aten::addmm`` it runs inside
itself; the operators the backward pass runs count too (they sit under
``autograd::engine`` events, which are not ``aten::``). A hand-written softmax
is five or six of them, forward, and as many again backward; ``F.softmax`` is
one each way. Code compiled by ``torch.compile`` runs Inductor's generated
loops, which are not ``aten::`` operators: only the operators it still calls
(matrix products, for instance) are counted.

On CUDA (the trace holds GPU events): the kernel launches the host makes
inside a step (``cudaLaunchKernel`` and friends in the CUDA runtime and
driver lanes; Triton kernels from ``torch.compile`` are launched through the
driver). Launches are counted rather than the kernels themselves because a
kernel runs later than its launch, often after its step's range on the host
has closed. Each unfused operator launches at least one kernel; a fused one
launches one for the whole chain.

The value is in ops per step, averaged over the profiled steps. No lab grades
with it now (lab 3 did, before ``elementwise_traffic``).

Seen in TensorBoard: Profile › Operators, the Calls column (Profile › Diff:
original → yours); Trace timeline, the row of operators under each
``ProfilerStep#``.
"""

from __future__ import annotations

from ..trace import Measure, Trace, aten_ops, outermost

NAME = "op_count"
UNIT = "ops"

# Operators that only make a new view of a tensor's memory (or detach it): no
# arithmetic, no kernel. op_count leaves them out, with everything they run.
VIEW_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::unbind", "aten::split", "aten::as_strided", "aten::alias", "aten::detach", "aten::detach_",
    "aten::lift_fresh", "aten::numpy_T", "aten::contiguous",
})


def measure(trace: Trace) -> Measure:
    n = len(trace.steps)
    on_cuda = trace.on_cuda
    if on_cuda:
        counted = trace.within_steps(lambda e: e.cat in ("cuda_runtime", "cuda_driver") and "LaunchKernel" in e.name)
    else:
        counted = [e for e in outermost(aten_ops(trace)) if e.name not in VIEW_OPS]
    counts: dict[str, int] = {}
    for e in counted:
        counts[e.name] = counts.get(e.name, 0) + 1
    per_step = len(counted) / n
    top = sorted(((name, count / n) for name, count in counts.items()), key=lambda kv: -kv[1])
    names = ", ".join(f"{count:.0f} {name}" for name, count in top[:4])
    what = "kernel launches" if on_cuda else "aten ops"
    summary = f"{per_step:.0f} {what} per step" + (f" (most: {names})" if names else "")
    details = {"ops_per_step": per_step, "steps": float(n), **(dict(top[:12]) if not on_cuda else {})}
    return Measure(value=round(per_step, 1), unit=UNIT, summary=summary, details=details)
