"""The work a profiled step does, by size: the FLOPs of its matrix products and convolutions.

Not an evidence metric: the checker reads it beside one (a lab's
``[evidence] work_ops``) to tell a fix that does the same work faster from a
step that yields results computed in advance and runs a few throw-away
operators on tiny inputs. Counted from the shapes the profiler recorded
(``record_shapes``), so the number of calls does not matter, only their size.
"""

from __future__ import annotations

from typing import Any

from .trace import Event, Measure, Trace


def _product(values: list[Any]) -> float:
    out = 1.0
    for v in values:
        out *= float(v)
    return out


def _strides(event: Event, position: int) -> list[int]:
    """An integer list among an operator's concrete inputs (``'[2, 2]'``), or [1, 1]."""
    try:
        text = (event.args or {}).get("Concrete Inputs", [])[position]
        values = [int(v) for v in str(text).strip("[]").split(",") if v.strip()]
        return values or [1, 1]
    except (IndexError, ValueError, TypeError):
        return [1, 1]


def flops(event: Event) -> float:
    """Floating-point operations of one matrix product or convolution, from the shapes the profiler recorded.

    ``aten::mm`` of (m×k)·(k×n) is 2·m·k·n; ``aten::addmm`` and ``aten::baddbmm``
    take their matrices second and third; ``aten::bmm`` adds the batch.
    ``aten::convolution`` is 2 × every output element × the kernel's
    input-channel·height·width; ``aten::convolution_backward`` twice that (the
    gradients of the input and of the weight). 0 for any other operator, for
    a product with a sparse operand (the trace gives it no strides: its dense
    shape says nothing of the work done), or when the trace holds no shapes
    (``record_shapes`` off).
    """
    dims = (event.args or {}).get("Input Dims") or []
    strides = (event.args or {}).get("Input Strides") or []
    if any(isinstance(d, list) and d and not (i < len(strides) and strides[i]) for i, d in enumerate(dims)):
        return 0.0  # an operand without strides is sparse: its dense size says nothing of the work
    try:
        if event.name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if event.name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if event.name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if event.name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if event.name == "aten::convolution":
            x, w = dims[0], dims[1]
            out_positions = _product(x[2:]) / _product(_strides(event, 3)[: len(x) - 2])
            return 2.0 * x[0] * w[0] * out_positions * _product(w[1:])
        if event.name == "aten::convolution_backward":
            grad, w = dims[0], dims[2]
            return 4.0 * grad[0] * grad[1] * _product(grad[2:]) * _product(w[1:])
    except (IndexError, TypeError, ValueError):
        return 0.0
    return 0.0


def work_flops(trace: Trace, ops: tuple[str, ...]) -> Measure:
    """The work a profiled step does, by size: FLOPs per step of the operators in ``ops``, at any depth.

    Counted from the shapes of every call inside a ``ProfilerStep#``, on any
    thread, so that throw-away calls on tiny inputs do not add up to a step's
    work, whatever their number. Matrix products that ``torch.compile``'s code
    calls are ``aten::mm``/``aten::addmm`` too, and count.
    """
    n = len(trace.steps)
    wanted = set(ops)
    calls = trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in wanted)
    total = sum(flops(e) for e in calls)
    per_step = total / n if n else 0.0
    return Measure(value=per_step, unit="FLOPs",
                   summary=f"{per_step / 1e6:.1f} MFLOPs per step in {len(calls) / max(n, 1):.0f} calls",
                   details={"flops_per_step": per_step, "calls_per_step": len(calls) / max(n, 1), "steps": float(n)})


def work_shapes(trace: Trace, ops: tuple[str, ...]) -> dict[str, int]:
    """The shapes the operators in ``ops`` ran on in the profiled steps: ``"aten::addmm [8, 512] x [512, 2048]"``
    -> calls. Only the tensors (a bias the product adds is left out, as are scalars)."""
    wanted = set(ops)
    found: dict[str, int] = {}
    for e in trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in wanted):
        dims = [d for d in (e.args or {}).get("Input Dims") or [] if isinstance(d, list) and len(d) >= 2]
        key = f"{e.name} " + " x ".join(str(d) for d in dims)
        found[key] = found.get(key, 0) + 1
    return found


def other_shapes(original: list[Trace], learner: list[Trace], ops: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The shapes the original's ``ops`` ran on (every trace: a torchrun job's ranks), and those the learner's
    ran on that the original's never did."""
    def shapes(traces: list[Trace]) -> set[str]:
        return {key for trace in traces for key in work_shapes(trace, ops)}

    theirs = shapes(original)
    return sorted(theirs), sorted(shapes(learner) - theirs)
