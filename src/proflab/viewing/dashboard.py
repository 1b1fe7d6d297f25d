"""The kit's profiler views, as a TensorBoard tab that needs no network: "Profile".

The PyTorch Profiler plugin's Overview and Operator pages draw with Google
Charts, loaded from the internet, so in a workshop room with no network they
spin forever; its Memory view does not read ``profile_memory`` traces of
torch 2.x. This tab reads the same runs (the newest trace under each run
folder of TensorBoard's log folder) and serves, as JSON for its own page
(``dashboard_static/``, plain HTML and JavaScript, nothing fetched from
elsewhere):

* ``/overview``: step time and where it went (``breakdown``), host reads per
  step, and a recommendation where one part of the step is large;
* ``/operators``: the operator table of key_averages (``operators.table``),
  per step or in total;
* ``/diff``: two runs' tables side by side, per step (``operators.diff``);
* ``/memory``: for a run profiled with ``profile_memory``, memory allocated
  over the profiled steps, its peak, and the operators that allocate most;
  ``/memory.svg`` draws the curve (matplotlib, on the server).

Registered through the ``tensorboard_plugins`` entry point in pyproject.toml.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import Request, Response, wrappers

from ..measuring import breakdown, evidence, operators
from . import loading
from .timeline import OfflineTab, open_route

STATIC = Path(__file__).resolve().parent / "dashboard_static"

# A part of the step this large gets a recommendation (shares of the host time per step).
ADVICE = {
    "DataLoader wait": (0.3, "The DataLoader takes {share:.0%} of each step: the loop waits for its data. Load "
                             "batches in the background: DataLoader(num_workers=…), and pin_memory=True on CUDA."),
    "syncs": (0.2, "Host reads and syncs take {share:.0%} of each step: the host waits for the device or reads a "
                   "value back (.item(), .cpu(), .tolist(), printing a tensor). Keep values on the device, read "
                   "them once in a while."),
    "other": (0.3, "Python between operators takes {share:.0%} of each step (the ProfilerStep# self time): many "
                   "small operations launched one by one from Python, or the host doing work of its own. "
                   "Vectorise (one operator over a whole tensor), or fuse."),
}
READS_ADVICE = ("{reads:g} host reads per step ({names}): each read of a tensor into Python (.item(), .tolist(), "
                ".cpu(), float(t), if t:) stops the host until the value is ready, on CUDA until the device has "
                "caught up. Keep the values on the device and read them once per "
                "interval, not every step.")
COMM_ADVICE = ("The ranks talk {share:.0%} of each step ({calls}), and they all-reduce the gradients between "
               "micro-batches, not once per optimizer step: let DDP skip it on every micro-batch but the last "
               "(model.no_sync()), and send fewer, larger buckets (bucket_cap_mb).")
COMM_SHARE = 0.3  # communication this large a share of the step, between micro-batches, gets COMM_ADVICE
DDP_FORWARD = "DistributedDataParallel.forward"
DEVICE_IDLE_ADVICE = ("The device is busy only {busy:.0%} of each step: it waits for the host. Look at the host "
                      "parts above, and at what launches the kernels.")


class ProfilePlugin(OfflineTab):
    plugin_name = "proflab_profile"
    TAB_NAME = "Profile"
    STATIC = STATIC

    def __init__(self, context: base_plugin.TBContext):
        super().__init__(context)

    def get_plugin_apps(self):
        return {
            "/index.js": self._static("index.js", "application/javascript"),
            "/index.html": self._static("index.html", "text/html"),
            "/runs": self._json(lambda args: list(self._runs())),
            "/open": open_route(self.logdir),
            "/overview": self._json(lambda args: self._overview(args.get("run", ""))),
            "/about": self._json(lambda args: self._about(args.get("run", ""))),
            "/operators": self._json(lambda args: [r.as_dict() for r in operators.table(
                self._trace(args.get("run", "")), per_step=args.get("per", "step") == "step")]),
            "/diff": self._json(lambda args: {
                "before": args.get("before", ""), "after": args.get("after", ""),
                "changes": [c.as_dict() for c in operators.diff(self._trace(args.get("before", "")),
                                                               self._trace(args.get("after", "")))]}),
            "/memory": self._json(lambda args: memory(self._trace(args.get("run", "")))),
            "/memory.svg": self._memory_svg,
        }

    def _loaded(self, run: str) -> tuple[Path, loading.Loaded]:
        path = self._runs().get(run)
        if path is None:  # only traces found under the log folder are ever read
            raise LookupError(f"no run {run!r}")
        return path, loading.load(path)

    def _trace(self, run: str) -> evidence.Trace:
        path, loaded = self._loaded(run)
        return loaded.trace(path)

    def _overview(self, run: str) -> dict[str, Any]:
        path, loaded = self._loaded(run)
        return {**overview(loaded.trace(path)), "window": loaded.window}

    def _about(self, run: str) -> dict[str, Any]:
        path = self._runs().get(run)
        if path is None:
            raise LookupError(f"no run {run!r}")
        return loading.about(path)

    @staticmethod
    def _json(answer):
        @wrappers.Request.application
        def serve(request: Request) -> Response:
            try:
                body = answer(request.args)
            except LookupError as e:
                return Response(json.dumps({"error": str(e)}), status=404, content_type="application/json")
            except (evidence.TraceError, ValueError, TypeError, KeyError, AttributeError, OSError) as e:
                return Response(json.dumps({"error": unreadable(e)}), status=422, content_type="application/json")
            return Response(json.dumps(body), content_type="application/json")

        return serve

    @wrappers.Request.application
    def _memory_svg(self, request: Request) -> Response:
        try:
            found = memory(self._trace(request.args.get("run", "")))
            if not found["recorded"]:
                return Response("this run was profiled without profile_memory", status=404)
            return Response(memory_svg(found), content_type="image/svg+xml")
        except LookupError:
            return Response("no such run", status=404)
        except (evidence.TraceError, ValueError, TypeError, AttributeError, OSError) as e:
            return Response(unreadable(e), status=422, content_type="text/plain; charset=utf-8")


def unreadable(e: Exception) -> str:
    """What a view says of a trace it cannot read (cut short, empty, not JSON, no steps): never a traceback."""
    if isinstance(e, evidence.TraceError):
        return str(e)
    return f"this trace cannot be read ({type(e).__name__}: {e}): profile the run again"


def overview(trace: evidence.Trace) -> dict[str, Any]:
    """Where a profiled step's time went, and what to try where one part is large."""
    b = breakdown.of(trace)
    reads = evidence.host_syncs(trace)
    names = {k: v for k, v in reads.details.items() if k not in ("round_trips_per_step", "dtoh_copies_per_step",
                                                                  "steps")}
    advice = [text.format(share=b.share(part)) for part, (limit, text) in ADVICE.items() if b.share(part) >= limit]
    if reads.value >= 1:
        advice.append(READS_ADVICE.format(reads=reads.value, names=", ".join(
            f"{count:g} {name}" for name, count in sorted(names.items(), key=lambda kv: -kv[1]))))
    comm = evidence.allreduce_calls(trace) if b.comm_ms else None
    if comm is not None and b.step_ms and b.comm_ms / b.step_ms >= COMM_SHARE and _syncs_between_micro_batches(trace):
        advice.append(COMM_ADVICE.format(share=b.comm_ms / b.step_ms, calls=comm.summary))
    if trace.on_cuda and b.step_ms and b.device_busy_ms / b.step_ms < 0.5:
        advice.append(DEVICE_IDLE_ADVICE.format(busy=b.device_busy_ms / b.step_ms))
    return {
        "steps": b.steps, "step_ms": b.step_ms, "on_cuda": trace.on_cuda,
        "parts": [{"key": part, "label": breakdown.LABELS[part], "ms": b.host_ms[part], "share": b.share(part)}
                  for part in breakdown.HOST_PARTS],
        "device_busy_ms": b.device_busy_ms,
        # A distributed job's rank: the time its collectives cover, its all-reduce calls and MB per step.
        "comm_ms": b.comm_ms, "comm_share": b.comm_ms / b.step_ms if b.step_ms else 0.0,
        "allreduce_per_step": comm.value if comm else 0.0,
        "allreduce_mb_per_step": comm.details.get("mb_per_step") if comm else None,  # None: shapes not recorded
        "host_reads_per_step": reads.value, "host_reads": names,
        "advice": advice,
    }


def _syncs_between_micro_batches(trace: evidence.Trace) -> bool:
    """Whether a step all-reduces between two of its DDP forward passes: after a micro-batch's backward,
    where gradient accumulation needs no all-reduce yet."""
    forwards = sorted(e.ts for e in trace.events if e.name == DDP_FORWARD)
    calls = [e.ts for e in trace.events if e.cat == "cpu_op" and e.name in evidence.ALLREDUCE_OPS]
    for step in trace.steps:
        inside = [t for t in forwards if step.ts <= t < step.end]
        if any(a < t < b for a, b in zip(inside, inside[1:]) for t in calls):
            return True
    return False


def memory(trace: evidence.Trace) -> dict[str, Any]:
    """Memory allocated over the profiled steps, per device, from the ``[memory]`` events of ``profile_memory``;
    what each step leaves behind, and the operators whose allocations are never freed (``measuring.memory``)."""
    from ..measuring import memory as trace_memory

    return trace_memory.curve(trace)


def memory_svg(found: dict[str, Any]) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2), dpi=100)
    ax = fig.subplots()
    for device, d in found["devices"].items():
        ax.step(d["t_ms"], d["allocated_mb"], where="post", label=f"{device} (peak {d['peak_mb']:.1f} MB)")
        ax.plot([d["peak_t_ms"]], [d["peak_mb"]], "v", color="black")
    for start in found.get("step_starts_ms", []):
        ax.axvline(start, color="#bbbbbb", linewidth=0.8, linestyle=":")
    ax.set_xlabel("ms since the first profiled step (dotted: each step's start)")
    ax.set_ylabel("MB allocated")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="svg")
    return out.getvalue()
