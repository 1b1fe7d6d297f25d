"""The work a profiled step does, by size: the FLOPs of its matrix products and convolutions.

Not an evidence metric: the checker reads it beside one (a lab's
``[evidence] work_ops``) to tell a fix that does the same work faster from a
step that yields results computed in advance and runs a few throw-away
operators on tiny inputs. Counted from the shapes the profiler recorded
(``record_shapes``), so the number of calls does not matter, only their size.
"""

from __future__ import annotations

from typing import Any

from .trace import Event, Measure, Trace, outermost


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
        # Products a step may run instead of those (a rank's whole share of work, ``rank_share``)
        if event.name == "aten::_addmm_activation":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if event.name == "aten::addbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if event.name in ("aten::mv", "aten::addmv"):
            (m, k) = dims[0] if event.name == "aten::mv" else dims[1]
            return 2.0 * m * k
        if event.name in ("aten::dot", "aten::vdot"):
            return 2.0 * dims[0][0]
        if event.name == "aten::addr":
            return 2.0 * dims[1][0] * dims[2][0]
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


# TorchScript's frozen, optimized graphs (torch.jit.optimize_for_inference) run their convolutions as
# prim::mkldnn_convolution on weights prepacked for oneDNN: the interpreter calls them without the
# dispatcher, so the trace holds no event for them, only the output each allocates (an aten::empty in
# oneDNN's layout) and the operator that reads it next.
MKLDNN_LAYOUT = "3"  # torch._mkldnn, as aten::empty's concrete inputs give a layout
# The unseen time inside the scripted calls, per step, must reach this share of the time the original's
# convolutions take: an empty graph that allocates activations and yields cached results takes none.
HIDDEN_TIME_SHARE = 0.1


def _conv_output(event: Event) -> tuple[int, ...] | None:
    """The shape of a convolution's output, from its input's and weight's shapes and its stride, padding
    and dilation (concrete inputs 3, 4 and 5)."""
    dims = (event.args or {}).get("Input Dims") or []
    try:
        x, w = dims[0], dims[1]
        spatial = len(x) - 2
        stride, pad, dil = (_strides(event, i)[:spatial] for i in (3, 4, 5))
        if not ((event.args or {}).get("Concrete Inputs") or [""] * 5)[4]:
            pad = [0] * spatial  # not recorded: _strides' default of 1 is no padding's
        out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
        return (x[0], w[0], *out)
    except (IndexError, TypeError, ValueError):
        return None


def hidden_convolutions(trace: Trace, original: Trace) -> Measure:
    """The original's convolutions that the profiled steps run out of the profiler's sight, credited with
    the original's FLOPs: those of a scripted, frozen graph whose convolutions are prepacked for oneDNN
    (see ``MKLDNN_LAYOUT``). Each original convolution counts once its output's shape is matched, per
    step, by an output a scripted call allocated in oneDNN's layout (the shape read from the operator
    that reads it next), and only while the scripted calls spend, outside every operator the trace
    shows, at least ``HIDDEN_TIME_SHARE`` of the time the original's convolutions take."""
    n, n_orig = len(trace.steps), len(original.steps)
    none = Measure(value=0.0, unit="FLOPs", summary="no convolution out of the profiler's sight",
                   details={"flops_per_step": 0.0, "calls_per_step": 0.0})
    if not n or not n_orig:
        return none
    convs = original.within_steps(lambda e: e.cat == "cpu_op" and e.name == "aten::convolution")
    conv_time = sum(e.dur for e in convs) / n_orig
    ops = trace.within_steps(lambda e: e.cat == "cpu_op")
    scripted = [e for e in ops if "::" not in e.name]  # a TorchScript method's call: forward
    by_thread: dict[tuple[str, str], list[Event]] = {}
    for e in ops:
        if "::" in e.name:
            by_thread.setdefault((str(e.pid), str(e.tid)), []).append(e)
    shapes: dict[tuple[int, ...], int] = {}
    hidden = 0.0
    for call in scripted:
        inside = sorted((e for e in by_thread.get((str(call.pid), str(call.tid)), [])
                         if call.ts <= e.ts and e.end <= call.end), key=lambda e: e.ts)
        hidden += max(call.dur - sum(e.dur for e in outermost(inside)), 0.0)
        for i, e in enumerate(inside):
            concrete = (e.args or {}).get("Concrete Inputs") or []
            if e.name == "aten::empty" and len(concrete) > 2 and concrete[2] == MKLDNN_LAYOUT:
                reader = next((r for r in inside[i + 1:] if r.name != "aten::empty" and r.ts >= e.end), None)
                dims = [d for d in ((reader.args or {}).get("Input Dims") or []) if isinstance(d, list)] \
                    if reader is not None else []
                if dims and len(dims[0]) == 4:
                    key = tuple(dims[0])
                    shapes[key] = shapes.get(key, 0) + 1
    if hidden / n < HIDDEN_TIME_SHARE * conv_time:
        return none
    credited = calls = 0.0
    per_step = {k: v / n for k, v in shapes.items()}
    for e in convs:
        out = _conv_output(e)
        if out is not None and per_step.get(out, 0.0) >= 1.0 / n_orig - 1e-9:
            per_step[out] -= 1.0 / n_orig
            credited += flops(e) / n_orig
            calls += 1.0 / n_orig
    return Measure(value=credited, unit="FLOPs",
                   summary=f"{credited / 1e6:.1f} MFLOPs per step in {calls:.0f} convolutions a scripted graph "
                           f"ran out of the profiler's sight",
                   details={"flops_per_step": credited, "calls_per_step": calls,
                            "hidden_ms_per_step": hidden / n / 1000})

