"""Batch-norm calls per step: every normalisation that runs as its own pass over the activations.

A batch norm in ``eval()`` mode scales and shifts every channel by fixed
numbers; after a convolution, that is a convolution with other weights and a
bias, so a folded model runs none. Counted on the host, per profiled step,
however the normalisation is spelled:

* each outermost batch-norm operator (``NORM_OPS``, any name holding
  ``batch_norm`` or ``instance_norm``): ``aten::batch_norm``, which
  ``nn.BatchNorm2d`` and ``F.batch_norm`` call, ``aten::native_batch_norm``,
  ``aten::_native_batch_norm_legit_no_training``, ``aten::cudnn_batch_norm``
  and the rest, once each (not again for those it runs inside itself);
* each outermost elementwise operator that applies a **per-channel** tensor
  to an activation, on any view, layout or dtype: one operand is an
  activation (four-dimensional with more than one channel and more than one
  pixel, or any view of one: a tensor of two dimensions or more holding as
  many elements as one of the step's four-dimensional activations, such as
  ``x.permute(0, 2, 3, 1)`` or its ``(N*H*W, C)`` rows), and another
  broadcasts onto it varying along one of its dimensions only, one as long
  as an activation of the step has channels (``(C, 1, 1)``,
  ``(1, C, 1, 1)``, ``(C,)`` against channels last, or expanded to the
  activation's shape with zero strides, read from the recorded strides), or
  one that every image of a batch shares, varying along its channels and
  perhaps its pixels (a scale materialised to ``(1, C, H, W)``): a
  batch norm written by hand, ``(x - mean) / torch.sqrt(var + eps) * weight
  + bias``, is four of them, and ``x * scale + shift`` two; a bias added
  after a convolution instead of inside it is one (``F.conv2d(x, w, b)``
  adds it in the same pass); a ``torch._foreach_*`` call's lists of tensors
  are read as their tensors;
* each convolution with one input channel per group and a 1×1 kernel
  (weights ``(C, 1, 1, 1)``): a per-channel scale spelled as a convolution.

The convolution's own bias is not counted, nor are ReLUs, the pooling, or
the classifier (its bias, added by hand or by a frozen model, applies to the
``(N, classes)`` logits, no activation's view; matrix products are not
elementwise). Needs shapes (``record_shapes=True``, as the checker
profiles); the value is the count per step, averaged over the profiled steps.

Seen in TensorBoard: Profile › Operators, the Calls of ``aten::batch_norm``
(divided by the profiled steps) and its share of Self CPU in
``aten::native_batch_norm``; Trace timeline, a ``aten::batch_norm`` after
every ``aten::conv2d`` inside each ``ProfilerStep#``.
"""

from __future__ import annotations

from typing import Any

from ..trace import Event, Measure, Trace, TraceError, aten_ops, outermost

NAME = "batchnorm_calls"
UNIT = "per step"

# Any operator whose name holds one of these normalises with per-channel statistics (an instance norm
# given running statistics is a batch norm).
NORM_OPS = ("batch_norm", "instance_norm")
CONVOLUTIONS = frozenset({
    "aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
    "aten::cudnn_convolution", "aten::conv_depthwise2d", "aten::_conv_depthwise2d", "aten::thnn_conv2d",
    "aten::_slow_conv2d_forward", "aten::slow_conv2d_forward",
})
# Operators that read their inputs without arithmetic between them: a copy to channels_last reads an
# activation and writes one, whatever its strides.
NOT_ARITHMETIC = frozenset({
    "aten::copy_", "aten::clone", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::empty_like",
    "aten::zeros_like", "aten::ones_like", "aten::cat", "aten::stack", "aten::detach",
    # views: a per-channel tensor expanded to an activation's shape is read by the operator that uses it
    "aten::expand", "aten::expand_as", "aten::broadcast_to", "aten::view", "aten::view_as", "aten::reshape",
    "aten::reshape_as", "aten::as_strided", "aten::_reshape_alias", "aten::_unsafe_view", "aten::alias",
})


def _is_norm(name: str) -> bool:
    return any(part in name for part in NORM_OPS)


def _extent(dims: list, strides: list | None) -> list[int]:
    """The sizes a tensor really varies along: a dimension of stride 0 (expanded) holds one value."""
    if isinstance(strides, list) and len(strides) == len(dims):
        return [1 if s == 0 else d for d, s in zip(dims, strides)]
    return list(dims)


def _tensors(e: Event) -> list[tuple[list[int], list[int] | None]]:
    args = e.args or {}
    dims, strides = args.get("Input Dims") or [], args.get("Input Strides") or []
    found = []
    for i, d in enumerate(dims):
        s = strides[i] if i < len(strides) else None
        if isinstance(d, list) and d and all(isinstance(n, int) for n in d):
            found.append((d, s))
        elif isinstance(d, list) and d and all(isinstance(t, list) for t in d):  # a list of tensors (_foreach_*)
            for k, one in enumerate(d):
                if one and all(isinstance(n, int) for n in one):
                    found.append((one, s[k] if isinstance(s, list) and k < len(s) else None))
    return found


# Matrix products take a bias that broadcasts over their rows: not an elementwise pass over an activation.
PRODUCTS = ("mm", "matmul", "linear", "addmv", "einsum", "dot", "tensordot")


def _activation(dims: list[int]) -> bool:
    return len(dims) == 4 and dims[1] > 1 and dims[2] * dims[3] > 1


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _per_channel(dims: list[int], strides: list[int] | None, of: list[int], channels: set[int]) -> bool:
    """Broadcasts onto a tensor of shape ``of`` varying along one of its dimensions only, one that holds
    more than one value and as many as an activation of the step has channels (``channels``), while
    ``of`` varies along another too: right-aligned, every other dimension of its extent holds one value.
    (A factor per row or per column of an image is not per channel.)"""
    if len(dims) > len(of):
        return False
    extent = [1] * (len(of) - len(dims)) + _extent(dims, strides)
    varying = [k for k, n in enumerate(extent) if n > 1]
    return len(varying) == 1 and extent[varying[0]] == of[varying[0]] and extent[varying[0]] in channels and \
        any(n > 1 for k, n in enumerate(of) if k != varying[0])


def _shared_by_the_batch(dims: list[int], strides: list[int] | None, of: list[int], channels: set[int]) -> bool:
    """Broadcasts onto a four-dimensional activation (or a permuted view of one: its first dimension is the
    batch) of more than one image, holding one value along the batch and varying along its channels, and
    perhaps along its pixels too: a per-channel factor every image of the batch shares (a batch norm's
    scale materialised to ``(1, C, H, W)``, in any layout)."""
    if len(of) != 4 or of[0] < 2 or len(dims) > 4:
        return False
    extent = [1] * (4 - len(dims)) + _extent(dims, strides)
    return extent[0] == 1 and all(n in (1, of[k]) for k, n in enumerate(extent)) and \
        any(n > 1 and n in channels for n in extent[1:])


def _applies_per_channel(e: Event, activations: set[int], channels: set[int]) -> bool:
    """An operator applying a per-channel tensor to an activation or to a view of one (``activations``:
    the sizes, in elements, of the step's four-dimensional activations; ``channels``: their channels)."""
    if e.name in NOT_ARITHMETIC or e.name in CONVOLUTIONS or any(p in e.name.split("::")[-1] for p in PRODUCTS):
        return False
    tensors = _tensors(e)
    for i, (dims, _) in enumerate(tensors):
        if _activation(dims) or (len(dims) >= 2 and _numel(dims) in activations):
            if any(_per_channel(d, s, dims, channels) or _shared_by_the_batch(d, s, dims, channels)
                   for j, (d, s) in enumerate(tensors) if j != i):
                return True
    return False


def _depthwise_1x1(e: Event) -> bool:
    tensors = _tensors(e)
    return e.name in CONVOLUTIONS and len(tensors) >= 2 and len(tensors[1][0]) == 4 and \
        tensors[1][0][1:] == [1, 1, 1] and tensors[1][0][0] > 1


def _recorded_shapes(ops: list[Event]) -> bool:
    return any((e.args or {}).get("Input Dims") for e in ops)


def measure(trace: Trace) -> Measure:
    steps = trace.steps
    n = len(steps)
    ops = aten_ops(trace)
    if ops and not _recorded_shapes(ops):
        raise TraceError("the trace records no shapes: profile with record_shapes=True")
    norms = outermost([e for e in ops if _is_norm(e.name)])
    inside_norm: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for e in norms:
        inside_norm.setdefault((str(e.pid), str(e.tid)), []).append((e.ts, e.end))
    shapes = [d for e in ops for d, _ in _tensors(e) if _activation(d)]
    activations, channels = {_numel(d) for d in shapes}, {d[1] for d in shapes}
    by_hand = [e for e in outermost([e for e in ops if not _is_norm(e.name)])
               if (_applies_per_channel(e, activations, channels) or _depthwise_1x1(e))
               and not any(a <= e.ts < b for a, b in inside_norm.get((str(e.pid), str(e.tid)), []))]
    counts: dict[str, int] = {}
    for e in norms:
        counts[e.name] = counts.get(e.name, 0) + 1
    spelled: dict[str, int] = {}
    for e in by_hand:
        what = f"{e.name} as a 1x1 depthwise convolution" if _depthwise_1x1(e) else \
            f"{e.name} applying a per-channel tensor to an activation"
        spelled[what] = spelled.get(what, 0) + 1
    per_step = (len(norms) + len(by_hand)) / n if n else 0.0
    parts = [f"{c / n:.3g} {name}" for name, c in sorted(counts.items(), key=lambda kv: -kv[1])]
    parts += [f"{c / n:.3g} {what}" for what, c in sorted(spelled.items(), key=lambda kv: -kv[1])]
    summary = f"{per_step:.3g} batch-norm calls per step" + (f" ({', '.join(parts)})" if parts else "")
    details: dict[str, Any] = {"calls_per_step": per_step, "operators_per_step": len(norms) / n if n else 0.0,
                               "by_hand_per_step": len(by_hand) / n if n else 0.0, "steps": float(n)}
    details.update({name: c / n for name, c in counts.items()})
    details.update({what: c / n for what, c in spelled.items()})
    return Measure(value=round(per_step, 2), unit=UNIT, summary=summary, details=details)
